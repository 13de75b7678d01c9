"""Fleet IPMI: power, boot device, sensors and discovery for many BMCs at once, safely.

    session      one RMCP+ (IPMI 2.0 lanplus) session per BMC, cipher suite 17 or 3 only
    client       one BMC's operations: power with read-back, boot device, sensors, FRU, MAC
    fleet        many BMCs in parallel, one command in flight each, bounded retries
    status       a site's BMCs and its racks' measured power (`rackform bmc status`)
    discovery    sweep an OOB range and identify what answers (`rackform discover`)
    enlist       write inventory entries for new BMCs without touching existing ones
    credentials  where logins come from; passwords never printed
    wire         the packets; fakebmc: a misbehaving BMC for tests

Nothing is imported here: `import rackform.ipmi.fleet` pays only for what it uses.
See docs/ipmi.md.
"""

# -*- coding: utf-8 -*-
"""AES-128 in CBC mode without padding, as RMCP+ confidentiality (AES-CBC-128) needs it.

`cryptography` does it where it is installed (rackform depends on it, and so does
ansible-core); otherwise the small FIPS-197 implementation below, so the Ansible module
runs on a controller Python with nothing but the standard library. Slow (about 20 us a
block), which is nothing next to a BMC's round trip. Standard library only.
"""

from __future__ import absolute_import, division, print_function

BLOCK = 16

try:
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
except ImportError:  # pragma: no cover - exercised by the unit tests through the pure functions
    Cipher = None


def cbc_encrypt(key, iv, plain):
    if Cipher is not None:
        encryptor = Cipher(algorithms.AES(key), modes.CBC(iv)).encryptor()
        return encryptor.update(plain) + encryptor.finalize()
    return pure_cbc_encrypt(key, iv, plain)


def cbc_decrypt(key, iv, encrypted):
    if Cipher is not None:
        decryptor = Cipher(algorithms.AES(key), modes.CBC(iv)).decryptor()
        return decryptor.update(encrypted) + decryptor.finalize()
    return pure_cbc_decrypt(key, iv, encrypted)


# --- FIPS-197 AES-128 -------------------------------------------------------------------------

def _xtime(a):
    return ((a << 1) ^ 0x1B) & 0xFF if a & 0x80 else a << 1


def _multiply(a, b):
    result = 0
    while b:
        if b & 1:
            result ^= a
        a, b = _xtime(a), b >> 1
    return result


def _sbox():
    box, inverse = [0] * 256, [0] * 256
    for value in range(256):
        # multiplicative inverse in GF(2^8), then the affine transformation
        inv = next((c for c in range(1, 256) if _multiply(value, c) == 1), 0) if value else 0
        s = inv
        for shift in range(1, 5):
            s ^= ((inv << shift) | (inv >> (8 - shift))) & 0xFF
        s ^= 0x63
        box[value], inverse[s] = s, value
    return box, inverse


_TABLES = {}


def _tables():
    """S-box, inverse S-box and GF(2^8) multiplication tables, built on first use (~0.1 s)."""
    if not _TABLES:
        _TABLES["sbox"], _TABLES["inverse"] = _sbox()
        _TABLES["mul"] = dict((f, [_multiply(v, f) for v in range(256)]) for f in (2, 3, 9, 11, 13, 14))
    return _TABLES["sbox"], _TABLES["inverse"], _TABLES["mul"]


def _round_keys(key):
    SBOX = _tables()[0]
    words = [list(key[i:i + 4]) for i in range(0, 16, 4)]
    rcon = 1
    for i in range(4, 44):
        word = list(words[i - 1])
        if i % 4 == 0:
            word = [SBOX[b] for b in word[1:] + word[:1]]
            word[0] ^= rcon
            rcon = _xtime(rcon)
        words.append([a ^ b for a, b in zip(words[i - 4], word)])
    return [sum(words[r * 4:r * 4 + 4], []) for r in range(11)]


def _encrypt_block(keys, block):
    SBOX, _, _MUL = _tables()
    state = [b ^ k for b, k in zip(block, keys[0])]
    for round_number in range(1, 11):
        state = [SBOX[b] for b in state]
        state = [state[(i + 4 * (i % 4)) % 16] for i in range(16)]  # ShiftRows (column-major state)
        if round_number < 10:
            mixed = []
            for c in range(4):
                a = state[4 * c:4 * c + 4]
                m2, m3 = _MUL[2], _MUL[3]
                mixed += [m2[a[0]] ^ m3[a[1]] ^ a[2] ^ a[3], a[0] ^ m2[a[1]] ^ m3[a[2]] ^ a[3],
                          a[0] ^ a[1] ^ m2[a[2]] ^ m3[a[3]], m3[a[0]] ^ a[1] ^ a[2] ^ m2[a[3]]]
            state = mixed
        state = [b ^ k for b, k in zip(state, keys[round_number])]
    return bytes(state)


def _decrypt_block(keys, block):
    _, INVERSE_SBOX, _MUL = _tables()
    state = [b ^ k for b, k in zip(block, keys[10])]
    for round_number in range(9, -1, -1):
        state = [state[(i - 4 * (i % 4)) % 16] for i in range(16)]  # InvShiftRows
        state = [INVERSE_SBOX[b] for b in state]
        state = [b ^ k for b, k in zip(state, keys[round_number])]
        if round_number > 0:
            mixed = []
            for c in range(4):
                a = state[4 * c:4 * c + 4]
                m9, m11, m13, m14 = _MUL[9], _MUL[11], _MUL[13], _MUL[14]
                mixed += [m14[a[0]] ^ m11[a[1]] ^ m13[a[2]] ^ m9[a[3]], m9[a[0]] ^ m14[a[1]] ^ m11[a[2]] ^ m13[a[3]],
                          m13[a[0]] ^ m9[a[1]] ^ m14[a[2]] ^ m11[a[3]], m11[a[0]] ^ m13[a[1]] ^ m9[a[2]] ^ m14[a[3]]]
            state = mixed
    return bytes(state)


def pure_cbc_encrypt(key, iv, plain):
    keys, previous, out = _round_keys(bytes(key)), bytes(iv), bytearray()
    for i in range(0, len(plain), BLOCK):
        previous = _encrypt_block(keys, bytes(a ^ b for a, b in zip(plain[i:i + BLOCK], previous)))
        out += previous
    return bytes(out)


def pure_cbc_decrypt(key, iv, encrypted):
    keys, previous, out = _round_keys(bytes(key)), bytes(iv), bytearray()
    for i in range(0, len(encrypted), BLOCK):
        block = bytes(encrypted[i:i + BLOCK])
        out += bytes(a ^ b for a, b in zip(_decrypt_block(keys, block), previous))
        previous = block
    return bytes(out)

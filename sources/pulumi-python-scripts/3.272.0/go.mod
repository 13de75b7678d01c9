// Two plain files of Pulumi's Python SDK that the engine runs beside its language host:
// pulumi-language-python-exec and pulumi-resource-pulumi-python (the dynamic-provider launcher),
// taken from the Go module github.com/pulumi/pulumi/sdk/v3 at the version of the pip SDK we pin.
module rackform.local/sources/pulumi-python-scripts

go 1.26.0

require github.com/pulumi/pulumi/sdk/v3 v3.272.0

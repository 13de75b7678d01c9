module rackform.test/vapeval

go 1.26.0

require k8s.io/apiserver v0.36.3

require github.com/blang/semver/v4 v4.0.0

require github.com/coreos/go-oidc v2.5.0+incompatible

require github.com/coreos/go-systemd/v22 v22.7.0

require github.com/emicklei/go-restful/v3 v3.13.0

require github.com/fsnotify/fsnotify v1.9.0

require github.com/go-logr/logr v1.4.3

require github.com/go-openapi/jsonreference v0.20.2

require github.com/google/cel-go v0.26.0

require github.com/google/gnostic-models v0.7.0

require github.com/google/go-cmp v0.7.0

require github.com/google/uuid v1.6.0

require github.com/gorilla/websocket v1.5.4-0.20250319132907-e064f32e3674

require github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus v1.1.0

require github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822

require github.com/mxk/go-flowrate v0.0.0-20140419014527-cca7078d478f

require github.com/spf13/pflag v1.0.9

require go.etcd.io/etcd/api/v3 v3.6.8

require go.etcd.io/etcd/client/pkg/v3 v3.6.8

require go.etcd.io/etcd/client/v3 v3.6.8

require go.etcd.io/etcd/server/v3 v3.6.8

require go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc v0.65.0

require go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp v0.65.0

require go.opentelemetry.io/otel v1.41.0

require go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc v1.40.0

require go.opentelemetry.io/otel/metric v1.41.0

require go.opentelemetry.io/otel/sdk v1.40.0

require go.opentelemetry.io/otel/trace v1.41.0

require go.uber.org/zap v1.27.1

require golang.org/x/crypto v0.47.0

require golang.org/x/net v0.49.0

require golang.org/x/sync v0.19.0

require golang.org/x/sys v0.40.0

require golang.org/x/text v0.33.0

require golang.org/x/time v0.14.0

require google.golang.org/genproto/googleapis/api v0.0.0-20260128011058-8636f8732409

require google.golang.org/grpc v1.79.3

require google.golang.org/protobuf v1.36.12-0.20260120151049-f2248ac996af

require gopkg.in/evanphx/json-patch.v4 v4.13.0

require gopkg.in/go-jose/go-jose.v2 v2.6.3

require gopkg.in/natefinch/lumberjack.v2 v2.2.1

require k8s.io/api v0.36.3

require k8s.io/apimachinery v0.36.3

require k8s.io/client-go v0.36.3

require k8s.io/component-base v0.36.3

require k8s.io/klog/v2 v2.140.0

require k8s.io/kms v0.36.3

require k8s.io/kube-openapi v0.0.0-20260317180543-43fb72c5454a

require k8s.io/streaming v0.36.3

require k8s.io/utils v0.0.0-20260210185600-b8788abfbbc2

require sigs.k8s.io/apiserver-network-proxy/konnectivity-client v0.34.0

require sigs.k8s.io/json v0.0.0-20250730193827-2d320260d730

require sigs.k8s.io/randfill v1.0.0

require sigs.k8s.io/structured-merge-diff/v6 v6.3.3

require sigs.k8s.io/yaml v1.6.0

require cel.dev/expr v0.25.1

require github.com/NYTimes/gziphandler v1.1.1

require github.com/antlr4-go/antlr/v4 v4.13.0

require github.com/beorn7/perks v1.0.1

require github.com/cenkalti/backoff/v5 v5.0.3

require github.com/cespare/xxhash/v2 v2.3.0

require github.com/coreos/go-semver v0.3.1

require github.com/davecgh/go-spew v1.1.2-0.20180830191138-d8f796af33cc

require github.com/dustin/go-humanize v1.0.1

require github.com/felixge/httpsnoop v1.0.4

require github.com/fxamacker/cbor/v2 v2.9.0

require github.com/go-logr/stdr v1.2.2

require github.com/go-openapi/jsonpointer v0.21.0

require github.com/go-openapi/swag v0.23.0

require github.com/gogo/protobuf v1.3.2

require github.com/golang/protobuf v1.5.4

require github.com/google/btree v1.1.3

require github.com/grpc-ecosystem/go-grpc-middleware/v2 v2.3.3

require github.com/grpc-ecosystem/grpc-gateway/v2 v2.27.7

require github.com/inconshreveable/mousetrap v1.1.0

require github.com/jonboulle/clockwork v0.5.0

require github.com/josharian/intern v1.0.0

require github.com/json-iterator/go v1.1.12

require github.com/kylelemons/godebug v1.1.0

require github.com/mailru/easyjson v0.7.7

require github.com/moby/spdystream v0.5.1

require github.com/modern-go/concurrent v0.0.0-20180306012644-bacd9c7ef1dd

require github.com/modern-go/reflect2 v1.0.3-0.20250322232337-35a7c28c31ee

require github.com/pmezard/go-difflib v1.0.1-0.20181226105442-5d4384ee4fb2

require github.com/pquerna/cachecontrol v0.1.0

require github.com/prometheus/client_golang v1.23.2

require github.com/prometheus/client_model v0.6.2

require github.com/prometheus/common v0.67.5

require github.com/prometheus/procfs v0.19.2

require github.com/sirupsen/logrus v1.9.3

require github.com/soheilhy/cmux v0.1.5

require github.com/spf13/cobra v1.10.2

require github.com/stoewer/go-strcase v1.3.0

require github.com/x448/float16 v0.8.4

require go.etcd.io/bbolt v1.4.3

require go.etcd.io/etcd/pkg/v3 v3.6.8

require go.etcd.io/raft/v3 v3.6.0

require go.opentelemetry.io/auto/sdk v1.2.1

require go.opentelemetry.io/otel/exporters/otlp/otlptrace v1.40.0

require go.opentelemetry.io/proto/otlp v1.9.0

require go.uber.org/multierr v1.11.0

require go.yaml.in/yaml/v2 v2.4.3

require go.yaml.in/yaml/v3 v3.0.4

require golang.org/x/exp v0.0.0-20251219203646-944ab1f22d93

require golang.org/x/oauth2 v0.34.0

require golang.org/x/term v0.39.0

require google.golang.org/genproto/googleapis/rpc v0.0.0-20260128011058-8636f8732409

require gopkg.in/inf.v0 v0.9.1

require gopkg.in/yaml.v3 v3.0.1

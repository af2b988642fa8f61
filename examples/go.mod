module github.com/quotagate/quotagate/examples

go 1.26.0

require (
	github.com/gin-gonic/gin v1.12.0
	github.com/go-chi/chi/v5 v5.5.0
	github.com/gofiber/fiber/v2 v2.52.15
	github.com/gofiber/fiber/v3 v3.1.0
	github.com/labstack/echo/v4 v4.16.0
	github.com/labstack/echo/v5 v5.4.4
	github.com/prometheus/client_golang v1.25.0
	github.com/quotagate/quotagate/adapters/chi v0.0.0
	github.com/quotagate/quotagate/adapters/echo v0.0.0
	github.com/quotagate/quotagate/adapters/echov5 v0.0.0
	github.com/quotagate/quotagate/adapters/fiber v0.0.0
	github.com/quotagate/quotagate/adapters/fiberv3 v0.0.0
	github.com/quotagate/quotagate/adapters/gin v0.0.0
	github.com/quotagate/quotagate/adapters/grpc v0.0.0
	github.com/quotagate/quotagate/adapters/nethttp v0.0.0
	github.com/quotagate/quotagate/client v0.0.0
	github.com/quotagate/quotagate/engine v0.0.0
	github.com/quotagate/quotagate/metrics/otel v0.0.0
	github.com/quotagate/quotagate/metrics/prometheus v0.0.0
	github.com/quotagate/quotagate/stores/memory v0.0.0
	github.com/quotagate/quotagate/stores/redis v0.0.0
	go.opentelemetry.io/otel/exporters/stdout/stdoutmetric v1.47.0
	go.opentelemetry.io/otel/sdk/metric v1.47.0
	google.golang.org/genproto/googleapis/rpc v0.0.0-20261110000943-09e21b237f2c
	google.golang.org/grpc v1.85.0
)

require (
	github.com/andybalholm/brotli v1.2.0 // indirect
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/bytedance/gopkg v0.1.3 // indirect
	github.com/bytedance/sonic v1.15.0 // indirect
	github.com/bytedance/sonic/loader v0.5.0 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/cloudwego/base64x v0.1.6 // indirect
	github.com/felixge/httpsnoop v1.1.0 // indirect
	github.com/gabriel-vasile/mimetype v1.4.12 // indirect
	github.com/gin-contrib/sse v1.1.0 // indirect
	github.com/go-logr/logr v1.4.4 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/go-playground/locales v0.14.1 // indirect
	github.com/go-playground/universal-translator v0.18.1 // indirect
	github.com/go-playground/validator/v10 v10.30.1 // indirect
	github.com/goccy/go-json v0.10.5 // indirect
	github.com/goccy/go-yaml v1.19.2 // indirect
	github.com/gofiber/schema v1.7.0 // indirect
	github.com/gofiber/utils/v2 v2.0.2 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/json-iterator/go v1.1.12 // indirect
	github.com/klauspost/compress v1.20.1 // indirect
	github.com/klauspost/cpuid/v2 v2.3.0 // indirect
	github.com/labstack/gommon v0.5.0 // indirect
	github.com/leodido/go-urn v1.4.0 // indirect
	github.com/mattn/go-colorable v0.1.15 // indirect
	github.com/mattn/go-isatty v0.0.22 // indirect
	github.com/mattn/go-runewidth v0.0.16 // indirect
	github.com/modern-go/concurrent v0.0.0-20180306012644-bacd9c7ef1dd // indirect
	github.com/modern-go/reflect2 v1.0.2 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/pelletier/go-toml/v2 v2.2.4 // indirect
	github.com/philhofer/fwd v1.2.0 // indirect
	github.com/prometheus/client_model v0.6.3 // indirect
	github.com/prometheus/common v0.72.0 // indirect
	github.com/prometheus/procfs v0.22.0 // indirect
	github.com/quic-go/qpack v0.6.0 // indirect
	github.com/quic-go/quic-go v0.59.0 // indirect
	github.com/redis/rueidis v1.0.79 // indirect
	github.com/rivo/uniseg v0.2.0 // indirect
	github.com/tinylib/msgp v1.6.3 // indirect
	github.com/twitchyliquid64/golang-asm v0.15.1 // indirect
	github.com/ugorji/go/codec v1.3.1 // indirect
	github.com/valyala/bytebufferpool v1.0.0 // indirect
	github.com/valyala/fasthttp v1.69.0 // indirect
	github.com/valyala/fasttemplate v1.2.2 // indirect
	go.mongodb.org/mongo-driver/v2 v2.5.0 // indirect
	go.opentelemetry.io/auto/sdk v1.2.1 // indirect
	go.opentelemetry.io/otel v1.47.0 // indirect
	go.opentelemetry.io/otel/log v1.47.0 // indirect
	go.opentelemetry.io/otel/metric v1.47.0 // indirect
	go.opentelemetry.io/otel/sdk v1.47.0 // indirect
	go.opentelemetry.io/otel/trace v1.47.0 // indirect
	golang.org/x/arch v0.22.0 // indirect
	golang.org/x/crypto v0.57.0 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

replace (
	github.com/quotagate/quotagate/adapters/chi => ../adapters/chi
	github.com/quotagate/quotagate/adapters/echo => ../adapters/echo
	github.com/quotagate/quotagate/adapters/echov5 => ../adapters/echov5
	github.com/quotagate/quotagate/adapters/fiber => ../adapters/fiber
	github.com/quotagate/quotagate/adapters/fiberv3 => ../adapters/fiberv3
	github.com/quotagate/quotagate/adapters/gin => ../adapters/gin
	github.com/quotagate/quotagate/adapters/grpc => ../adapters/grpc
	github.com/quotagate/quotagate/adapters/nethttp => ../adapters/nethttp
	github.com/quotagate/quotagate/client => ../client
	github.com/quotagate/quotagate/engine => ../engine
	github.com/quotagate/quotagate/metrics/otel => ../metrics/otel
	github.com/quotagate/quotagate/metrics/prometheus => ../metrics/prometheus
	github.com/quotagate/quotagate/stores/memory => ../stores/memory
	github.com/quotagate/quotagate/stores/redis => ../stores/redis
)

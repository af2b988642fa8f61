module github.com/quotagate/quotagate/tests/adapters/fiberv3

go 1.26.0

require (
	github.com/gofiber/fiber/v3 v3.1.0
	github.com/quotagate/quotagate/adapters/fiberv3 v0.0.0
	github.com/quotagate/quotagate/conformance v0.0.0
	github.com/quotagate/quotagate/engine v0.0.0
	github.com/quotagate/quotagate/tests v0.0.0
	github.com/valyala/fasthttp v1.69.0
)

require (
	github.com/andybalholm/brotli v1.2.0 // indirect
	github.com/gofiber/fiber/v2 v2.52.15 // indirect
	github.com/gofiber/schema v1.7.0 // indirect
	github.com/gofiber/utils/v2 v2.0.2 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/klauspost/compress v1.20.1 // indirect
	github.com/mattn/go-colorable v0.1.15 // indirect
	github.com/mattn/go-isatty v0.0.22 // indirect
	github.com/mattn/go-runewidth v0.0.16 // indirect
	github.com/philhofer/fwd v1.2.0 // indirect
	github.com/quotagate/quotagate/client v0.0.0 // indirect
	github.com/quotagate/quotagate/stores/memory v0.0.0 // indirect
	github.com/quotagate/quotagate/stores/redis v0.0.0 // indirect
	github.com/redis/rueidis v1.0.79 // indirect
	github.com/rivo/uniseg v0.2.0 // indirect
	github.com/tinylib/msgp v1.6.3 // indirect
	github.com/valyala/bytebufferpool v1.0.0 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	golang.org/x/crypto v0.57.0 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.42.0 // indirect
)

// The tests module's local requirements resolve through these lines too: a
// quotagate module added there needs its line here.
replace (
	github.com/quotagate/quotagate/adapters/chi => ../../../adapters/chi
	github.com/quotagate/quotagate/adapters/echo => ../../../adapters/echo
	github.com/quotagate/quotagate/adapters/echov5 => ../../../adapters/echov5
	github.com/quotagate/quotagate/adapters/fiber => ../../../adapters/fiber
	github.com/quotagate/quotagate/adapters/fiberv3 => ../../../adapters/fiberv3
	github.com/quotagate/quotagate/adapters/gin => ../../../adapters/gin
	github.com/quotagate/quotagate/adapters/grpc => ../../../adapters/grpc
	github.com/quotagate/quotagate/adapters/nethttp => ../../../adapters/nethttp
	github.com/quotagate/quotagate/client => ../../../client
	github.com/quotagate/quotagate/conformance => ../../../conformance
	github.com/quotagate/quotagate/engine => ../../../engine
	github.com/quotagate/quotagate/metrics/otel => ../../../metrics/otel
	github.com/quotagate/quotagate/metrics/prometheus => ../../../metrics/prometheus
	github.com/quotagate/quotagate/stores/memory => ../../../stores/memory
	github.com/quotagate/quotagate/stores/redis => ../../../stores/redis
	github.com/quotagate/quotagate/tests => ../..
)

module github.com/quotagate/quotagate/bench

go 1.26.0

require (
	github.com/go-chi/chi/v5 v5.5.0
	github.com/go-chi/httprate v0.16.1
	github.com/go-redis/redis_rate/v10 v10.0.1
	github.com/gofiber/fiber/v2 v2.52.15
	github.com/gofiber/fiber/v3 v3.1.0
	github.com/labstack/echo/v4 v4.16.0
	github.com/labstack/echo/v5 v5.4.4
	github.com/quotagate/quotagate/adapters/chi v0.0.0
	github.com/quotagate/quotagate/adapters/echo v0.0.0
	github.com/quotagate/quotagate/adapters/echov5 v0.0.0
	github.com/quotagate/quotagate/adapters/fiber v0.0.0
	github.com/quotagate/quotagate/adapters/fiberv3 v0.0.0
	github.com/quotagate/quotagate/adapters/grpc v0.0.0
	github.com/quotagate/quotagate/engine v0.0.0
	github.com/quotagate/quotagate/stores/memory v0.0.0
	github.com/quotagate/quotagate/stores/redis v0.0.0
	github.com/redis/go-redis/v9 v9.23.0
	github.com/redis/rueidis v1.0.79
	github.com/redis/rueidis/rueidislimiter v1.0.76
	github.com/sethvargo/go-limiter v0.7.1
	github.com/ulule/limiter/v3 v3.11.2
	github.com/valyala/fasthttp v1.69.0
	google.golang.org/grpc v1.85.0
)

require (
	github.com/andybalholm/brotli v1.2.0 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/felixge/httpsnoop v1.1.0 // indirect
	github.com/gofiber/schema v1.7.0 // indirect
	github.com/gofiber/utils/v2 v2.0.2 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/klauspost/compress v1.18.4 // indirect
	github.com/klauspost/cpuid/v2 v2.4.0 // indirect
	github.com/labstack/gommon v0.5.0 // indirect
	github.com/mattn/go-colorable v0.1.15 // indirect
	github.com/mattn/go-isatty v0.0.22 // indirect
	github.com/mattn/go-runewidth v0.0.16 // indirect
	github.com/philhofer/fwd v1.2.0 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	github.com/quotagate/quotagate/adapters/nethttp v0.0.0 // indirect
	github.com/rivo/uniseg v0.2.0 // indirect
	github.com/tinylib/msgp v1.6.3 // indirect
	github.com/valyala/bytebufferpool v1.0.0 // indirect
	github.com/valyala/fasttemplate v1.2.2 // indirect
	github.com/zeebo/xxh3 v1.1.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/crypto v0.57.0 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20261110000943-09e21b237f2c // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

replace (
	github.com/quotagate/quotagate/adapters/chi => ../adapters/chi
	github.com/quotagate/quotagate/adapters/echo => ../adapters/echo
	github.com/quotagate/quotagate/adapters/echov5 => ../adapters/echov5
	github.com/quotagate/quotagate/adapters/fiber => ../adapters/fiber
	github.com/quotagate/quotagate/adapters/fiberv3 => ../adapters/fiberv3
	github.com/quotagate/quotagate/adapters/grpc => ../adapters/grpc
	github.com/quotagate/quotagate/adapters/nethttp => ../adapters/nethttp
	github.com/quotagate/quotagate/engine => ../engine
	github.com/quotagate/quotagate/stores/memory => ../stores/memory
	github.com/quotagate/quotagate/stores/redis => ../stores/redis
)

# quotagate — build/test entry points. `make` (= `make test`) is what CI runs.
SHELL := /bin/bash
.DEFAULT_GOAL := test

FRAMEWORK   ?= chi            # demo: chi | echo | echov5 | gin | fiber | fiberv3 | nethttp | grpc
REDIS_STATE ?= .redis-state   # state dir for redis-up / redis-down (gitignored)
BENCHFLAGS  ?=                # extra flags for `make bench`, e.g. BENCHFLAGS=-benchtime=5s
PEERFLAGS   ?=                # extra flags for the Redis peer table, e.g. PEERFLAGS="-rounds 5 -dur 3s"
DEMO_TZ     ?= UTC            # demo: the zone of GET /v1/daily's calendar day (the server's -tz)

.PHONY: test demo redis-up redis-down bench docs

## test: vet + race-test every module (starts throwaway Redis, Cluster and Sentinel if redis-server/redis-sentinel exist)
test:
	scripts/test.sh

## demo: run the demo load driver against one framework's example server
demo:
	cd examples && go run ./demo -framework=$(strip $(FRAMEWORK)) -tz=$(strip $(DEMO_TZ))

## redis-up: start a standalone Redis, a 3-master Cluster and (with redis-sentinel) a Sentinel set on free loopback ports
redis-up:
	scripts/redis.sh up $(strip $(REDIS_STATE))
	@echo "now run:  . $(strip $(REDIS_STATE))/env"

## redis-down: stop the servers started by redis-up and remove their state dir
redis-down:
	scripts/redis.sh down $(strip $(REDIS_STATE))

## bench: benchmarks of the bench/ module: the chi middleware side by side with
## its peers (go test -bench), then the Redis peer table (its own
## redis-server on a free loopback port, stopped by PID)
bench:
	@test -f bench/go.mod || { echo "bench/go.mod does not exist yet"; exit 1; }
	cd bench && go test -run '^$$' -bench . -benchmem $(BENCHFLAGS) ./...
	cd bench && go run ./redispeers $(PEERFLAGS)

## docs: regenerate docs/algorithms.md's tables and docs/algorithms/*.svg from the engine
docs:
	cd docs/plots && go generate ./...

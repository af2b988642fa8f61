module github.com/quotagate/quotagate/stores/redis

go 1.26

require (
	github.com/quotagate/quotagate/engine v0.0.0
	github.com/redis/rueidis v1.0.79
)

require golang.org/x/sys v0.47.0 // indirect

replace github.com/quotagate/quotagate/engine => ../../engine

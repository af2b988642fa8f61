module github.com/quotagate/quotagate/client

go 1.26.0

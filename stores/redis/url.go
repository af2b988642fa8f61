package redisstore

import (
	"fmt"
	"net"
	neturl "net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// urlSchemes are the schemes ParseURL accepts.
var urlSchemes = []string{"redis", "rediss", "unix", "valkey", "valkeys"}

// urlParams are the query parameters ParseURL accepts, each with a check
// of its value ("" when any value is fine).
var urlParams = map[string]func(v string) string{
	"addr":          checkAddr,
	"client_name":   func(string) string { return "" },
	"db":            func(string) string { return "" }, // rueidis checks it
	"dial_timeout":  positiveDuration,
	"write_timeout": positiveDuration,
	"master_set": func(v string) string {
		if strings.TrimSpace(v) == "" {
			return "must name the primary the sentinels monitor"
		}
		return ""
	},
	"protocol": func(v string) string {
		if v != "2" && v != "3" {
			return "must be 2 or 3 (RESP version)"
		}
		return ""
	},
	"max_retries": func(v string) string {
		if v != "0" {
			return "only 0 (no retries) is supported; rueidis retries idempotent calls by itself otherwise"
		}
		return ""
	},
	"client_cache": func(v string) string {
		if v != "0" {
			return "only 0 is supported: the Store never uses client-side caching"
		}
		return ""
	},
	"skip_verify": func(v string) string {
		if v != "" && v != "true" && v != "false" && v != "1" && v != "0" {
			return "must be true or false"
		}
		return ""
	},
}

// checkAddr checks an addr= value: host:port with the port in 1-65535
// (rueidis reads a value without a port, or without a host, as the URL's
// own host).
func checkAddr(v string) string {
	host, port, err := net.SplitHostPort(v)
	if err != nil || host == "" {
		return "must be host:port"
	}
	return checkPort(port)
}

// checkPort checks a port of the URL: 1-65535.
func checkPort(port string) string {
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "port must be 1-65535"
	}
	return ""
}

func positiveDuration(v string) string {
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return "must be a positive Go duration such as 500ms or 2s"
	}
	return ""
}

// checkURL rejects what rueidis.ParseURL would silently ignore or misread:
// an unknown scheme, an unknown or repeated query parameter, a value it
// would not honour. The errors name the valid choices.
func checkURL(raw string) error {
	if !strings.Contains(raw, "://") {
		return fmt.Errorf("%q has no scheme: want a URL such as redis://host:6379 (valid schemes: %s)", raw, strings.Join(urlSchemes, ", "))
	}
	u, err := neturl.Parse(raw)
	if err != nil {
		return err
	}
	if !slices.Contains(urlSchemes, u.Scheme) {
		return fmt.Errorf("unknown scheme %q; valid schemes: %s", u.Scheme, strings.Join(urlSchemes, ", "))
	}
	if p := u.Port(); p != "" || strings.HasSuffix(u.Host, ":") {
		if msg := checkPort(p); msg != "" {
			return fmt.Errorf("address %q: %s", u.Host, msg)
		}
	}
	q, err := neturl.ParseQuery(u.RawQuery)
	if err != nil {
		return fmt.Errorf("query: %w", err)
	}
	valid := make([]string, 0, len(urlParams))
	for k := range urlParams {
		valid = append(valid, k)
	}
	slices.Sort(valid)
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		check, ok := urlParams[k]
		if !ok {
			return fmt.Errorf("unknown query parameter %q; valid parameters: %s", k, strings.Join(valid, ", "))
		}
		if k != "addr" && len(q[k]) > 1 {
			return fmt.Errorf("query parameter %q given %d times; only addr may repeat", k, len(q[k]))
		}
		for _, v := range q[k] {
			if msg := check(v); msg != "" {
				return fmt.Errorf("query parameter %s=%q: %s", k, v, msg)
			}
		}
	}
	if q.Has("skip_verify") && u.Scheme != "rediss" && u.Scheme != "valkeys" {
		return fmt.Errorf("query parameter skip_verify needs TLS (rediss:// or valkeys://), not %s://", u.Scheme)
	}
	return nil
}

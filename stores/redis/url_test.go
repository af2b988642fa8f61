package redisstore

import (
	"errors"
	"strings"
	"testing"
)

// TestParseURLRejects: what rueidis.ParseURL would silently ignore or
// misread is an ErrInvalidOption naming the valid choices.
func TestParseURLRejects(t *testing.T) {
	for _, tc := range []struct {
		name, url string
		want      []string // substrings of the error
	}{
		{"unknown_scheme", "http://127.0.0.1:6379", []string{`unknown scheme "http"`, "redis, rediss, unix, valkey, valkeys"}},
		{"no_scheme", "127.0.0.1:6379", []string{"no scheme", "redis://host:6379"}},
		{"host_as_scheme", "localhost:6379", []string{"no scheme"}},
		{"unknown_param", "redis://h:6379?master_name=m", []string{`unknown query parameter "master_name"`, "master_set", "dial_timeout", "write_timeout"}},
		{"typo_param", "redis://h:6379?dialtimeout=1s", []string{`"dialtimeout"`, "valid parameters: addr, client_cache, client_name, db, dial_timeout, master_set, max_retries, protocol, skip_verify, write_timeout"}},
		{"repeated", "redis://h:6379?db=1&db=2", []string{`"db" given 2 times`}},
		{"bad_duration", "redis://h:6379?dial_timeout=5", []string{"dial_timeout", "positive Go duration"}},
		{"negative_duration", "redis://h:6379?write_timeout=-1s", []string{"write_timeout", "positive"}},
		{"zero_duration", "redis://h:6379?write_timeout=0s", []string{"write_timeout", "positive"}},
		{"protocol", "redis://h:6379?protocol=4", []string{"protocol", "2 or 3"}},
		{"max_retries", "redis://h:6379?max_retries=3", []string{"max_retries", "only 0"}},
		{"client_cache_on", "redis://h:6379?client_cache=1", []string{"client_cache", "never uses client-side caching"}},
		{"empty_master_set", "redis://h:26379?master_set=", []string{"master_set", "must name"}},
		{"skip_verify_plain", "redis://h:6379?skip_verify=true", []string{"skip_verify needs TLS"}},
		{"port_too_big", "redis://127.0.0.1:99999", []string{`address "127.0.0.1:99999"`, "1-65535"}},
		{"port_zero", "redis://127.0.0.1:0", []string{"1-65535"}},
		{"port_empty", "redis://127.0.0.1:", []string{"1-65535"}},
		{"addr_empty", "redis://127.0.0.1:6380?addr=", []string{`addr=""`, "host:port"}},
		{"addr_colon", "redis://127.0.0.1:6380?addr=:", []string{`addr=":"`, "host:port"}},
		{"addr_no_port", "redis://h:26379?addr=s2&master_set=m", []string{`addr="s2"`, "host:port"}},
		{"addr_bad_port", "redis://h:6379?addr=10.0.0.1:70000", []string{`addr="10.0.0.1:70000"`, "1-65535"}},
		{"second_addr_bad", "redis://h:6379?addr=h:7001&addr=h:", []string{`addr="h:"`, "1-65535"}},
		{"skip_verify_value", "rediss://h:6379?skip_verify=maybe", []string{"skip_verify", "true or false"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseURL(tc.url)
			if err == nil {
				t.Fatalf("ParseURL(%q): no error", tc.url)
			}
			if !errors.Is(err, ErrInvalidOption) {
				t.Errorf("error %v does not wrap ErrInvalidOption", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestParseURLAccepts(t *testing.T) {
	for _, url := range []string{
		"redis://127.0.0.1:6379",
		"redis://u:p@h:6379/2?client_name=api&protocol=2&max_retries=0&client_cache=0",
		"redis://h:7000?addr=h:7001&addr=h:7002",
		"redis://s1:26379?addr=s2:26379&master_set=mymaster&dial_timeout=500ms&write_timeout=2s",
		"rediss://h:6380?skip_verify=true",
		"rediss://h:6380?skip_verify",
		"valkey://h:6379?db=1",
		"unix:///run/redis.sock?db=3",
		"redis://localhost",
		"redis://[::1]:6379?addr=[::1]:6380",
	} {
		if _, err := ParseURL(url); err != nil {
			t.Errorf("ParseURL(%q): %v", url, err)
		}
	}
}

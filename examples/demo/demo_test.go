package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	testpb "google.golang.org/grpc/interop/grpc_testing"
)

// TestDemo runs `make demo FRAMEWORK=<name>` for every example server: build
// it, start it on a free port, drive the traffic, check the table and the
// metrics. This keeps the README's first command working in CI.
func TestDemo(t *testing.T) {
	t.Chdir("..")
	for _, fw := range append(slices.Clone(frameworks), grpcServer) {
		t.Run(fw, func(t *testing.T) {
			if err := run(fw); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestDemoUnknownFramework: `make demo FRAMEWORK=foo` names the valid
// frameworks instead of failing on a missing directory.
func TestDemoUnknownFramework(t *testing.T) {
	for _, fw := range []string{"foo", "", "../chi", "internal"} {
		err := run(fw)
		if err == nil || !strings.Contains(err.Error(), "valid frameworks are chi, echo, echov5, fiber, fiberv3, gin, nethttp, grpc") {
			t.Errorf("run(%q): %v, want an error listing the valid frameworks", fw, err)
		}
	}
}

// Once a client's global 100 per minute was spent, every example used to
// answer a preflight, an unknown method and an unknown path its own way
// (echo and net/http: 429, chi, gin and fiber: 404/405, counting nothing).
// Now one rule holds on every example: requests no route serves count
// in the global bucket and are limited, preflights are not.
func TestUnmatchedRequestsSameAnswerOnEveryExample(t *testing.T) {
	t.Chdir("..")
	for _, fw := range frameworks {
		t.Run(fw, func(t *testing.T) {
			base, _, stop, err := start(fw)
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			unmatched(fw, base, func(ok bool, msg string) {
				if !ok {
					t.Error(msg)
				}
			})
		})
	}
}

// With -otel every example server records its metrics through the OTel SDK
// and the stdout exporter prints them on standard error, at the latest when
// the server shuts down: a request served a second before SIGTERM, well
// inside the reader's 10 s interval, is in quotagate.requests on its way out.
func TestOtelFlagExportsAtShutdownOnEveryExample(t *testing.T) {
	t.Chdir("..")
	for _, fw := range append(slices.Clone(frameworks), grpcServer) {
		t.Run(fw, func(t *testing.T) {
			bin, dir, err := build(fw)
			if err != nil {
				t.Fatal(err)
			}
			var stderr bytes.Buffer
			base, _, stop, err := startBinTo(&stderr, bin, dir, "-otel")
			if err != nil {
				t.Fatal(err)
			}
			if err := oneRequest(fw, base); err != nil {
				stop()
				t.Fatal(err)
			}
			stop()
			out := stderr.String()
			for _, want := range []string{`"Name":"quotagate.requests"`, `"Value":"allowed"`, `"Name":"quotagate.store.duration"`} {
				if !strings.Contains(out, want) {
					t.Errorf("standard error after shutdown has no %s; it was:\n%s", want, out)
				}
			}
		})
	}
}

// oneRequest sends one request that the example's global limit decides:
// GET /v1/notes/1, or an EmptyCall to the gRPC server.
func oneRequest(fw, base string) error {
	if fw == grpcServer {
		cc, closeConn, err := grpcClient(base, "127.0.0.1")
		if err != nil {
			return err
		}
		defer closeConn()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = testpb.NewTestServiceClient(cc).EmptyCall(ctx, &testpb.Empty{})
		return err
	}
	resp, err := http.Get(base + "/v1/notes/1")
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	return resp.Body.Close()
}

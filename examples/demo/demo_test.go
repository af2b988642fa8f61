package main

import (
	"os"
	"testing"
)

// TestDemo runs `make demo` for every example server present: build it, start
// it on a free port, drive the traffic, check the table. This keeps the
// README's first command working in CI.
func TestDemo(t *testing.T) {
	t.Chdir("..")
	for _, fw := range []string{"chi", "echo", "gin", "fiber", "nethttp"} {
		if _, err := os.Stat(fw + "/main.go"); err != nil {
			continue // that example does not exist in this tree
		}
		t.Run(fw, func(t *testing.T) {
			if err := run(fw); err != nil {
				t.Fatal(err)
			}
		})
	}
}

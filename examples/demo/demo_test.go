package main

import "testing"

// TestDemo runs `make demo FRAMEWORK=<name>` for every example server: build
// it, start it on a free port, drive the traffic, check the table and the
// metrics. This keeps the README's first command working in CI.
func TestDemo(t *testing.T) {
	t.Chdir("..")
	for _, fw := range []string{"chi", "echo", "gin", "fiber", "nethttp"} {
		t.Run(fw, func(t *testing.T) {
			if err := run(fw); err != nil {
				t.Fatal(err)
			}
		})
	}
}

package limit

import "testing"

func TestNormalizeRoute(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"static", "/v1/health", "/v1/health"},
		{"empty", "", ""},
		{"chi_param", "/v1/notes/{id}", "/v1/notes/{id}"},
		{"chi_regexp", "/v1/notes/{id:[0-9]+}", "/v1/notes/{id}"},
		{"echo_gin_param", "/v1/notes/:id", "/v1/notes/{id}"},
		{"gin_catch_all", "/files/*filepath", "/files/{filepath}"},
		{"bare_star", "/files/*", "/files/*"},
		{"fiber_optional", "/v1/notes/:id?", "/v1/notes/{id}"},
		{"fiber_constraint", "/v1/notes/:id<int>", "/v1/notes/{id}"},
		{"fiber_constraint_args", "/v1/notes/:id<min(5);max(9)>", "/v1/notes/{id}"},
		{"nethttp_method", "GET /v1/notes/{id}", "/v1/notes/{id}"},
		{"nethttp_method_host", "GET example.com/v1/notes/{id}", "/v1/notes/{id}"},
		{"nethttp_host_only", "example.com/", "/"},
		{"nethttp_rest", "/files/{path...}", "/files/{path}"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := NormalizeRoute(tc.in); got != tc.want {
				t.Fatalf("NormalizeRoute(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

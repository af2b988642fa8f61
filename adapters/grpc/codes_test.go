package grpclimit_test

import (
	"net/http"
	"testing"

	grpclimit "github.com/quotagate/quotagate/adapters/grpc"
	"google.golang.org/grpc/codes"
)

func TestHTTPStatusFollowsGoogleRPCCode(t *testing.T) {
	for c, want := range map[codes.Code]int{
		codes.OK: 200, codes.Canceled: 499, codes.Unknown: 500, codes.InvalidArgument: 400,
		codes.DeadlineExceeded: 504, codes.NotFound: 404, codes.AlreadyExists: 409,
		codes.PermissionDenied: 403, codes.ResourceExhausted: 429, codes.FailedPrecondition: 400,
		codes.Aborted: 409, codes.OutOfRange: 400, codes.Unimplemented: 501, codes.Internal: 500,
		codes.Unavailable: 503, codes.DataLoss: 500, codes.Unauthenticated: 401, codes.Code(99): 500,
	} {
		if got := grpclimit.HTTPStatus(c); got != want {
			t.Errorf("HTTPStatus(%v) = %d, want %d", c, got, want)
		}
	}
}

func TestCodeOfTheEnginesStatuses(t *testing.T) {
	for status, want := range map[int]codes.Code{
		http.StatusTooManyRequests: codes.ResourceExhausted, http.StatusServiceUnavailable: codes.Unavailable,
		400: codes.InvalidArgument, 401: codes.Unauthenticated, 403: codes.PermissionDenied, 404: codes.NotFound,
		409: codes.Aborted, 499: codes.Canceled, 500: codes.Internal, 501: codes.Unimplemented,
		504: codes.DeadlineExceeded, 418: codes.Unknown, 599: codes.Unknown,
	} {
		if got := grpclimit.Code(status); got != want {
			t.Errorf("Code(%d) = %v, want %v", status, got, want)
		}
		// A code maps back to the status it came from (first code of a shared status).
		if got := grpclimit.HTTPStatus(want); want != codes.Unknown && got != status {
			t.Errorf("HTTPStatus(Code(%d)) = %d", status, got)
		}
	}
}

package grpclimit

import (
	"net/http"
	"time"

	"google.golang.org/grpc/codes"
)

// HTTPStatus returns the HTTP status that google.rpc.Code documents for a
// gRPC code (OK 200, InvalidArgument 400, ResourceExhausted 429,
// Unavailable 503, Canceled 499, ...; an unknown code 500): the status an
// Interceptor hands limit.Limiter.Finish, so that a Policy.CountStatus
// written for HTTP ("count statuses >= 400") means the same for gRPC calls.
func HTTPStatus(c codes.Code) int {
	switch c {
	case codes.OK:
		return http.StatusOK
	case codes.Canceled:
		return 499 // Client Closed Request, as google.rpc.Code maps it
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange:
		return http.StatusBadRequest
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	case codes.NotFound:
		return http.StatusNotFound
	case codes.AlreadyExists, codes.Aborted:
		return http.StatusConflict
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests
	case codes.Unimplemented:
		return http.StatusNotImplemented
	case codes.Unavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError // Unknown, Internal, DataLoss and codes outside the list
}

// Code returns the gRPC code of an HTTP status the engine answers a limited
// call with: ResourceExhausted for 429 Too Many Requests, Unavailable for
// 503 (FailClosed), and for the statuses a Policy.LimitedResponse may
// choose, the code google.rpc.Code maps to that status (the first one, for
// a status several codes share); Unknown for any other.
func Code(status int) codes.Code {
	switch status {
	case http.StatusTooManyRequests:
		return codes.ResourceExhausted
	case http.StatusServiceUnavailable:
		return codes.Unavailable
	case http.StatusOK:
		return codes.OK
	case 499:
		return codes.Canceled
	case http.StatusBadRequest:
		return codes.InvalidArgument
	case http.StatusGatewayTimeout:
		return codes.DeadlineExceeded
	case http.StatusNotFound:
		return codes.NotFound
	case http.StatusConflict:
		return codes.Aborted
	case http.StatusForbidden:
		return codes.PermissionDenied
	case http.StatusUnauthorized:
		return codes.Unauthenticated
	case http.StatusNotImplemented:
		return codes.Unimplemented
	case http.StatusInternalServerError:
		return codes.Internal
	}
	return codes.Unknown
}

// maxRetrySeconds bounds a RetryInfo delay: the engine's own bound on any
// delay (800 days), well inside a time.Duration.
const maxRetrySeconds = 800 * 24 * 3600

// secondsDuration is secs seconds, at most maxRetrySeconds.
func secondsDuration(secs int64) time.Duration {
	return time.Duration(min(secs, maxRetrySeconds)) * time.Second
}

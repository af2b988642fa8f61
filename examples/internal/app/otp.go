package app

import (
	"net/http"
	"time"

	limit "github.com/quotagate/quotagate/engine"
)

// OTPCode is the one-time code POST /v1/otp accepts, in the X-OTP request
// header.
const OTPCode = "123456"

// The otp policy's numbers: 3 failed attempts per OTPWindow per client
// (fixed window); the attempt that finds them spent blocks the client for
// OTPBlock, a repeat offence for twice as long, at most OTPBlockMax.
const (
	OTPLimit    = 3
	OTPWindow   = 5 * time.Second
	OTPBlock    = 8 * time.Second
	OTPBlockMax = 16 * time.Second
)

// OTPStatus is the answer of POST /v1/otp for the X-OTP header's value: 204
// No Content for OTPCode, 401 Unauthorized otherwise.
func OTPStatus(code string) int {
	if code == OTPCode {
		return http.StatusNoContent
	}
	return http.StatusUnauthorized
}

// otpPolicy is the policy of POST /v1/otp (named "otp": one bucket, which
// the admin routes look up and reset): it counts only the answers >= 400
// (CountStatus), so that a right code is free, and blocks (BlockFor,
// BlockMax): a blocked client gets 429 even with the right code.
func otpPolicy(c Config, d limit.Disclosure, s limit.HeaderStyle, f limit.FailureMode) limit.Policy {
	return limit.Policy{
		Name: "otp", Algorithm: limit.FixedWindow, Limit: OTPLimit, Window: OTPWindow,
		CountStatus: func(status int) bool { return status >= 400 },
		BlockFor:    OTPBlock, BlockMax: OTPBlockMax,
		Disclosure: d, HeaderStyle: s, FailureMode: f, Shadow: c.Shadow,
	}
}

package limit

import "errors"

var (
	// ErrInvalidPolicy means New rejected a Policy field; the wrapped message
	// names the field and the bound it broke.
	ErrInvalidPolicy = errors.New("limit: invalid policy")
	// ErrInvalidOption means New rejected an Option; the wrapped message names
	// the option.
	ErrInvalidOption = errors.New("limit: invalid option")
	// ErrInvalidIdentity means Limiter.Peek or Limiter.Reset was given an
	// identity the policy never keys a request by; the wrapped message says
	// why.
	ErrInvalidIdentity = errors.New("limit: invalid identity")
)

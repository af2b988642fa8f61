package limit

import "errors"

var (
	// ErrInvalidPolicy means New rejected a Policy field; the wrapped message
	// names the field and the bound it broke.
	ErrInvalidPolicy = errors.New("limit: invalid policy")
	// ErrInvalidOption means New rejected an Option; the wrapped message names
	// the option.
	ErrInvalidOption = errors.New("limit: invalid option")
	// ErrCircuitOpen means the store was not called: its circuit breaker
	// is open after the store answered nothing for a whole store timeout
	// or failed several calls in a row, and the policy's FailureMode
	// decided. The error wraps the failure that opened it. One probe call
	// every 250 ms finds out whether the store is back.
	ErrCircuitOpen = errors.New("limit: store not called, its circuit breaker is open")
)

package limit

import "errors"

var (
	// ErrInvalidPolicy means New rejected a Policy field; the wrapped message
	// names the field and the bound it broke.
	ErrInvalidPolicy = errors.New("limit: invalid policy")
	// ErrInvalidOption means New rejected an Option; the wrapped message names
	// the option.
	ErrInvalidOption = errors.New("limit: invalid option")
)

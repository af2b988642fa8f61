package otellimit_test

import "unsafe"

// unsafeString views b as a string, as a framework's zero-copy accessors do.
func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

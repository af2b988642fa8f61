package guard

// SilenceGrace is how long a silent store is confirmed before its calls
// fail: a call to a store that answers nothing fails at the timeout + the
// 1 ms tick + SilenceGrace.
const SilenceGrace = silenceGrace

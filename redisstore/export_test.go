package redisstore

// WithTestClock is withTestClock, for this package's tests.
var WithTestClock = withTestClock

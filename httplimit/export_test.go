package httplimit

import "github.com/sluicehq/sluice/internal/clientip"

// The parsers behind ClientIP and Transport, for their tests and fuzzers.
var (
	ParseRetryAfter = parseRetryAfter
	ParseForwarded  = clientip.ParseForwarded
	ParseNode       = clientip.ParseNode
)

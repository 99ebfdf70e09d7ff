// Package statsd sends statistics to a statsd server or a DogStatsD agent,
// on the wire as envoyproxy/ratelimit sends them, so that what was built on
// that service's stream (dashboards, alerts, a statsd_exporter) reads
// sluice's the same.
//
// A Client is the transport: lines of "name:value|type\n", batched into
// packets (at most MaxUDPPacket bytes over UDP, so that no datagram is
// fragmented; MaxTCPPacket over TCP), sent by one goroutine, with a queue
// of at most MaxQueueBytes waiting while the server does not answer. A
// caller never waits: a line that finds the queue full is dropped and
// counted (sluice_statsd_lines_dropped_total). The connection is made
// again with a back-off (RetryMin doubling up to RetryMax) when it fails;
// over TCP, a packet whose write failed is sent once more on the new
// connection.
//
// Plain and Dog encode the lines: Plain as lyft/gostats writes them (the
// tags, if any, already serialized in the name as ".__key=value"), Dog as
// DataDog's client writes them, with those tags taken out of the name into
// "|#key:value" and the name rewritten by the first Mogrifier that matches.
package statsd

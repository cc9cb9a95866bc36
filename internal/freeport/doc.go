// Package freeport finds TCP ports for test clusters whose members are
// killed and started again on the same addresses.
//
// A port the kernel hands out for "127.0.0.1:0" comes from its ephemeral
// range, the same range it draws the source ports of outgoing connections
// from. Once a member on such a port is killed, any connection made on the
// machine meanwhile (another member redialling, a client, a parallel test)
// may take the port as its source, and the member's restart then fails
// with "address already in use". The kernel never picks a source port
// outside the ephemeral range, so ports chosen there stay ours.
//
// Its contract: Listen and Ports hand out ports outside the ephemeral
// range, each at most once in a process's life and never one that another
// process using this package holds (a flock per port, which the kernel
// drops when the process exits, however it exits; where there is no flock
// the bind probe alone guards). Listen returns the port bound; a port
// Ports returns may still be taken by a process that does not use the
// package before the caller binds it. Both are safe for concurrent use.
//
// Where it sits: test support, internal to this module (member/membertest
// and the clusters of the end-to-end and jepsen-lite tests). It imports
// only the standard library and must never be imported by code that ships.
package freeport

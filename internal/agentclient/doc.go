// Package agentclient is the host side of the agent link: it dials the guest
// agent, runs the sync handshake and yamux, reconnects when the link drops,
// and offers typed calls for every agentproto operation.
package agentclient

// Client talks to one guest agent. (Filled in by the agent work.)
type Client struct{}

package apiv1

import "time"

// ListeningPort is a TCP port something listens on inside a sandbox.
type ListeningPort struct {
	Port     int    `json:"port"`
	Address  string `json:"address"`  // as the guest reports it: "0.0.0.0", "::", "127.0.0.1"
	Protocol string `json:"protocol"` // "tcp"
}

// PortList answers GET /v1/sandboxes/{id}/ports.
type PortList struct {
	Ports []ListeningPort `json:"ports"`
}

// CreatePortURLRequest is the body of POST /v1/sandboxes/{id}/ports/{port}/urls.
type CreatePortURLRequest struct {
	Public     bool `json:"public,omitempty"`
	TTLSeconds *int `json:"ttl_seconds,omitempty"` // default 3600
}

// PortURL is a preview URL of one port; Token is set for a private URL only.
type PortURL struct {
	URL       string    `json:"url"`
	Token     string    `json:"token,omitempty"`
	ExpiresAt time.Time `json:"expires_at"`
}

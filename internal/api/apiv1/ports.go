package apiv1

import "time"

// ListeningPort is one TCP socket listening in a sandbox's guest.
type ListeningPort struct {
	Port     int    `json:"port"`
	Address  string `json:"address"`
	Protocol string `json:"protocol"` // "tcp"
}

// PortList answers GET /v1/sandboxes/{id}/ports.
type PortList struct {
	Ports []ListeningPort `json:"ports"`
}

// CreatePortURLRequest is the body of POST /v1/sandboxes/{id}/ports/{port}/urls.
type CreatePortURLRequest struct {
	Public     bool `json:"public,omitempty"`
	TTLSeconds int  `json:"ttl_seconds,omitempty"`
}

// PortURL answers POST /v1/sandboxes/{id}/ports/{port}/urls. Token is
// shown once, for a private URL.
type PortURL struct {
	URL       string    `json:"url"`
	Port      int       `json:"port"`
	Public    bool      `json:"public"`
	Token     string    `json:"token,omitempty"`
	ExpiresAt time.Time `json:"expires_at"`
}

// PortConnection is one record of a sandbox's port audit log.
type PortConnection struct {
	Port int `json:"port"`
	// Via is what let the caller in: "key:key_…", "token:ptk_…" or "public:ptk_…".
	Via      string    `json:"via"`
	Remote   string    `json:"remote"`
	Started  time.Time `json:"started"`
	Ended    time.Time `json:"ended"`
	Status   int       `json:"status"`
	BytesIn  int64     `json:"bytes_in"`
	BytesOut int64     `json:"bytes_out"`
}

// PortLog answers GET /v1/sandboxes/{id}/ports/log.
type PortLog struct {
	Records []PortConnection `json:"records"`
}

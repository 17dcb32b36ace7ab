package apiv1

import "time"

// PutSecretRequest is the body of PUT /v1/secrets/{name}. The value is
// write-only: no route returns it.
type PutSecretRequest struct {
	Value string `json:"value"`
}

// Secret describes a stored secret, never its value.
type Secret struct {
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// SecretList answers GET /v1/secrets.
type SecretList struct {
	Secrets       []Secret `json:"secrets"`
	NextPageToken string   `json:"next_page_token,omitempty"`
}

// NetworkRecord is one egress audit record: a connection, HTTP request or
// DNS query the guest attempted and what the policy made of it.
type NetworkRecord struct {
	Time        time.Time `json:"time"`
	Kind        string    `json:"kind"` // "http", "https" (inside intercepted TLS), "tls", "tcp" or "dns"
	Destination string    `json:"destination"`
	Upstream    string    `json:"upstream,omitempty"`
	Allowed     bool      `json:"allowed"`
	Rule        string    `json:"rule"`
	BytesOut    int64     `json:"bytes_out"`
	BytesIn     int64     `json:"bytes_in"`
	// Injected names the headers the proxy set (never their values).
	Injected []string `json:"injected,omitempty"`
}

// NetworkLog answers GET /v1/sandboxes/{id}/network/log (incubating).
type NetworkLog struct {
	Records []NetworkRecord `json:"records"`
}

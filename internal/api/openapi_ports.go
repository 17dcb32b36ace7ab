package api

import (
	"maps"

	"github.com/space-sandbox/space/internal/api/apiv1"
)

// The OpenAPI docs and schema tables of the ports routes (ports.go).

func init() {
	maps.Copy(docs, portDocs())
	maps.Copy(typeDocs, portTypeDocs)
	maps.Copy(fieldDocs, portFieldDocs)
	schemaTypes["PortList"] = apiv1.PortList{}
	schemaTypes["CreatePortURLRequest"] = apiv1.CreatePortURLRequest{}
	schemaTypes["PortURL"] = apiv1.PortURL{}
	schemaTypes["PortLog"] = apiv1.PortLog{}
	optionalBody["CreatePortURLRequest"] = true
	pathParamDocs["port"] = "A TCP port in the guest, 1-65535 (else 400)"
	pathParamDocs["path"] = "The rest of the path, given to the guest as /{path}"
}

func portDocs() map[string]doc {
	d := map[string]doc{
		"GET /v1/sandboxes/{id}/ports": {summary: "What listens on TCP in a running sandbox's guest, by port (409 unless running)",
			status: "200", resp: "PortList"},
		"POST /v1/sandboxes/{id}/ports/{port}/urls": {summary: "Hand out a preview URL of a guest port: private (its token, shown once, " +
			"as X-Space-Port-Token or ?space_token= once, then a cookie) or public, expiring",
			body: "CreatePortURLRequest", status: "201", resp: "PortURL"},
		"GET /v1/sandboxes/{id}/ports/log": {summary: "The port audit log: the last 256 requests this server proxied to the sandbox's ports, oldest first",
			status: "200", resp: "PortLog"},
	}
	for _, m := range proxyMethods {
		d[m+" "+proxyPattern] = doc{summary: "The port proxy by path, with the owner's API key: the guest's answer to /{path} " +
			"(502 when nothing listens, 409 unless running)", status: "200", resp: "raw"}
	}
	return d
}

var portTypeDocs = map[string]string{
	"PortList":             "Answer of GET /v1/sandboxes/{id}/ports",
	"ListeningPort":        "A TCP socket listening in the guest",
	"CreatePortURLRequest": "Body of POST /v1/sandboxes/{id}/ports/{port}/urls (may be empty)",
	"PortURL":              "A preview URL; token is shown only in this answer",
	"PortLog":              "Answer of GET /v1/sandboxes/{id}/ports/log",
	"PortConnection":       "One proxied request (or upgraded connection) to a guest port",
}

var portFieldDocs = map[string]fieldDoc{
	"PortList.ports":                   {desc: "One entry per port and address, by port"},
	"ListeningPort.port":               {desc: "The TCP port", extra: obj{"minimum": 1, "maximum": 65535}},
	"ListeningPort.address":            {desc: "The address it listens on, as the guest reports it (0.0.0.0, ::, 127.0.0.1…); all are reachable through the proxy"},
	"ListeningPort.protocol":           {desc: "tcp", extra: enum("tcp")},
	"CreatePortURLRequest.public":      {desc: "true: anyone with the URL passes until it expires; default false: the URL needs its token"},
	"CreatePortURLRequest.ttl_seconds": {desc: "Lifetime, 1-604800 (7 days); default 3600", extra: obj{"minimum": 0, "maximum": 604800}},
	"PortURL.url":                      {desc: "http(s)://{port}-{sandbox_id}.{preview_domain}[:port]/"},
	"PortURL.port":                     {desc: "The guest port it opens"},
	"PortURL.public":                   {desc: "Whether it needs no token"},
	"PortURL.token":                    {desc: "spt_… token of a private URL (only its hash is kept)"},
	"PortURL.expires_at":               {desc: "When it stops opening the port"},
	"PortLog.records":                  {desc: "Oldest first"},
	"PortConnection.port":              {desc: "The guest port"},
	"PortConnection.via":               {desc: "What let the caller in: key:key_… (the owner's API key), token:ptk_… (a private URL or the traffic token), public:ptk_…"},
	"PortConnection.remote":            {desc: "The client's address as the listener saw it"},
	"PortConnection.started":           {desc: "When the request came"},
	"PortConnection.ended":             {desc: "When its answer (or the upgraded connection) ended"},
	"PortConnection.status":            {desc: "The HTTP status the client got (101 for an upgrade)"},
	"PortConnection.bytes_in":          {desc: "Bytes from the guest"},
	"PortConnection.bytes_out":         {desc: "Bytes to the guest"},
}

package e2b

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/space-sandbox/space/internal/api/apiv1"
)

// restError is E2B's error body: the HTTP status again, as a number, which
// the SDKs read (kill() is false only on code 404, pause() on 409).
type restError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeRESTError(w http.ResponseWriter, status int, format string, args ...any) {
	writeJSON(w, status, restError{Code: status, Message: fmt.Sprintf(format, args...)})
}

// writeErr answers err in E2B's shape: an error of the domain keeps the
// status /v1 gives its class and its public message; anything else is a
// 500 whose cause goes to the log only.
func (h *Handler) writeErr(w http.ResponseWriter, r *http.Request, err error) {
	var pe *publicError
	if errors.As(err, &pe) {
		writeRESTError(w, pe.status, "%s", pe.message)
		return
	}
	if status, msg, ok := domainError(err); ok {
		writeRESTError(w, status, "%s", msg)
		return
	}
	h.log.ErrorContext(r.Context(), "e2b: request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	writeRESTError(w, http.StatusInternalServerError, "internal error")
}

// publicError is an error of this package with a status and a message fit
// for the caller.
type publicError struct {
	status  int
	message string
}

func (e *publicError) Error() string { return e.message }

func errorf(status int, format string, args ...any) error {
	return &publicError{status: status, message: fmt.Sprintf(format, args...)}
}

func (h *Handler) restMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("POST /sandboxes", h.withKey(h.createSandbox))
	mux.HandleFunc("POST /v2/sandboxes", h.withKey(h.createSandbox))
	mux.HandleFunc("GET /sandboxes", h.withKey(h.listSandboxes))
	mux.HandleFunc("GET /v2/sandboxes", h.withKey(h.listSandboxes))
	mux.HandleFunc("GET /sandboxes/{id}", h.withKey(h.getSandbox))
	mux.HandleFunc("DELETE /sandboxes/{id}", h.withKey(h.killSandbox))
	mux.HandleFunc("POST /sandboxes/{id}/timeout", h.withKey(h.setTimeout))
	mux.HandleFunc("POST /sandboxes/{id}/pause", h.withKey(h.pauseSandbox))
	mux.HandleFunc("POST /sandboxes/{id}/connect", h.withKey(h.connectSandbox))
	mux.HandleFunc("POST /v2/sandboxes/{id}/connect", h.withKey(h.connectSandbox))
	mux.HandleFunc("POST /sandboxes/{id}/resume", h.withKey(h.connectSandbox))
	// Everything else E2B defines under its prefixes (metrics, logs,
	// snapshots, forks, network updates, templates, volumes, teams, …).
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeRESTError(w, http.StatusNotImplemented, "%s %s is not supported by SPACE's E2B-compatible API", r.Method, r.URL.Path)
	})
	return mux
}

// withKey requires X-API-KEY (a SPACE key, checked as /v1 checks its
// bearer keys) and hands it on.
func (h *Handler) withKey(fn func(w http.ResponseWriter, r *http.Request, who caller)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key := strings.TrimSpace(r.Header.Get(HeaderAPIKey))
		if key == "" {
			writeRESTError(w, http.StatusUnauthorized, "missing X-API-KEY header")
			return
		}
		fn(w, r, caller{key: key})
	}
}

func opDone(state string) bool {
	return state == apiv1.OpSucceeded || state == apiv1.OpFailed || state == apiv1.OpCancelled
}

// statusOfCode maps the contract's error codes to their HTTP statuses, as
// /v1 does.
func statusOfCode(code string) int {
	switch code {
	case "invalid_argument":
		return http.StatusBadRequest
	case "payload_too_large":
		return http.StatusRequestEntityTooLarge
	case "aborted":
		return http.StatusConflict
	case "deadline_exceeded":
		return http.StatusGatewayTimeout
	case "unauthenticated":
		return http.StatusUnauthorized
	case "permission_denied":
		return http.StatusForbidden
	case "not_found":
		return http.StatusNotFound
	case "conflict":
		return http.StatusConflict
	case "failed_precondition":
		return http.StatusPreconditionFailed
	case "resource_exhausted":
		return http.StatusTooManyRequests
	case "unavailable":
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

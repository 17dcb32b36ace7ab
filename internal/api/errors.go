package api

import (
	"log/slog"
	"net/http"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/sandbox"
)

// statusOf is the one place an errdefs class becomes an HTTP status.
func statusOf(c *errdefs.Class) int {
	switch c {
	case errdefs.ErrInvalidArgument:
		return http.StatusBadRequest
	case errdefs.ErrUnauthenticated:
		return http.StatusUnauthorized
	case errdefs.ErrPermissionDenied:
		return http.StatusForbidden
	case errdefs.ErrNotFound:
		return http.StatusNotFound
	case errdefs.ErrConflict, errdefs.ErrAborted:
		return http.StatusConflict
	case errdefs.ErrFailedPrecondition:
		return http.StatusPreconditionFailed
	case errdefs.ErrPayloadTooLarge:
		return http.StatusRequestEntityTooLarge
	case errdefs.ErrResourceExhausted:
		return http.StatusTooManyRequests
	case errdefs.ErrUnavailable:
		return http.StatusServiceUnavailable
	case errdefs.ErrDeadlineExceeded:
		return http.StatusGatewayTimeout
	case errdefs.ErrCancelled:
		return 499 // client closed request; never seen by a client that is gone
	default:
		return http.StatusInternalServerError
	}
}

// errorInfo turns err into what a tenant may see: the public message and
// details when err carries an errdefs.Public, otherwise a generic message.
func errorInfo(err error) (int, apiv1.Error) {
	c, msg, details := errdefs.Render(err)
	return statusOf(c), apiv1.Error{Code: c.Code(), Message: msg, Details: details}
}

// handlerFunc is a route's handler: it answers the request itself, or
// returns the error that handle writes.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// handle is the one adapter from a handler's error to its answer. A handler
// returns an error only before its answer began (a stream that breaks ends
// with an error event of its own and returns nil).
func (s *Server) handle(h handlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			s.writeError(w, r, err)
		}
	}
}

// writeError answers err and logs its cause with the request id.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	status, info := errorInfo(err)
	log := s.log(r)
	level := slog.LevelDebug
	if status >= 500 {
		level = slog.LevelError
	}
	log.Log(r.Context(), level, "request failed", "status", status, "code", info.Code, "err", sandbox.CauseString(err))
	writeJSON(w, status, apiv1.ErrorBody{Error: info})
}

// invalid builds a 400 with a field -> reason map in details.fields
// (sandbox.Invalid: the domain's validation errors have the same shape).
func invalid(fields map[string]string) error { return sandbox.Invalid(fields) }

package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/store"
)

// idempotencyRecords is the part of the store the idempotency middleware
// uses: the records are the edge's own (a replayed answer is HTTP), not the
// domain's.
type idempotencyRecords interface {
	PutIdempotencyRecord(ctx context.Context, rec *store.IdempotencyRecord) (stored *store.IdempotencyRecord, inserted bool, err error)
	CompleteIdempotencyRecord(ctx context.Context, tenantID, key string, status int, body []byte) error
	DeleteIdempotencyRecord(ctx context.Context, tenantID, key string) error
	PruneIdempotencyRecords(ctx context.Context, before time.Time) (int, error)
}

// IdempotencyTTL is how long an Idempotency-Key is remembered (documented in
// the OpenAPI document; the pruning itself is Server.Run's).
const IdempotencyTTL = 24 * time.Hour

// captureWriter passes a response through and keeps a copy of it.
type captureWriter struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (w *captureWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *captureWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.body.Write(b)
	return w.ResponseWriter.Write(b)
}

func (w *captureWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// idempotent makes a POST honour Idempotency-Key: the first answer is stored
// per tenant and key with a hash of method, URI and body; a repeat with the
// same hash gets that answer again (and the handler does not run), another
// hash gets 409. Answers that invite a retry (5xx, 429) are not kept.
func (s *Server) idempotent(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		if key == "" {
			next(w, r)
			return
		}
		if len(key) > 255 {
			s.writeError(w, r, invalid(map[string]string{"Idempotency-Key": "at most 255 characters"}))
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			s.writeError(w, r, bodyError(err))
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		h := sha256.New()
		io.WriteString(h, r.Method+"\n"+r.URL.RequestURI()+"\n")
		h.Write(body)
		hash := hex.EncodeToString(h.Sum(nil))

		ctx := r.Context()
		tenant := principal(ctx).TenantID
		unlock := s.idemLocks.Lock(tenant + "\x00" + key)
		defer unlock()
		rec, inserted, err := s.idem.PutIdempotencyRecord(ctx, &store.IdempotencyRecord{
			TenantID: tenant, Key: key, RequestHash: hash, CreatedAt: time.Now().UTC(),
		})
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		if !inserted {
			s.replay(w, r, rec, hash)
			return
		}
		cw := &captureWriter{ResponseWriter: w}
		// The record must be completed or dropped whatever the handler does.
		defer func() {
			bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			status := cw.status
			if status == 0 || status >= 500 || status == http.StatusTooManyRequests {
				if err := s.idem.DeleteIdempotencyRecord(bg, tenant, key); err != nil {
					s.log(r).Error("idempotency: drop record", "err", err)
				}
				return
			}
			if err := s.idem.CompleteIdempotencyRecord(bg, tenant, key, status, cw.body.Bytes()); err != nil {
				s.log(r).Error("idempotency: store answer", "err", err)
			}
		}()
		next(cw, r)
	}
}

func (s *Server) replay(w http.ResponseWriter, r *http.Request, rec *store.IdempotencyRecord, hash string) {
	if rec.RequestHash != hash {
		s.writeError(w, r, errdefs.New(errdefs.ErrConflict,
			"this Idempotency-Key was used for a different request").
			WithDetails(map[string]any{"idempotency_key": rec.Key}))
		return
	}
	if rec.Status == 0 {
		s.writeError(w, r, errdefs.New(errdefs.ErrConflict,
			"a request with this Idempotency-Key is still in progress; retry later").
			WithDetails(map[string]any{"idempotency_key": rec.Key}))
		return
	}
	w.Header().Set("Idempotent-Replayed", "true")
	if len(rec.Body) > 0 {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(rec.Body)))
	}
	w.WriteHeader(rec.Status)
	w.Write(rec.Body)
}

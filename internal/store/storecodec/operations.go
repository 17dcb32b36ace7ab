package storecodec

import "github.com/space-sandbox/space/internal/store"

// OperationColumns are the operations columns in the order ScanOperation
// reads.
const OperationColumns = `id, tenant_id, type, target, state, progress, error, result, params, created_at, updated_at, done_at,
	lease_owner, lease_expires_at`

// ScanOperation reads one operations row of OperationColumns; a zero lease
// expiry is no lease.
func ScanOperation(row Row) (*store.Operation, error) {
	var op store.Operation
	var progress, errInfo, result, params *string
	var created, updated int64
	var done *int64
	var leaseExpires int64
	if err := row.Scan(&op.ID, &op.TenantID, &op.Type, &op.Target, &op.State, &progress, &errInfo, &result, &params,
		&created, &updated, &done, &op.LeaseOwner, &leaseExpires); err != nil {
		return nil, err
	}
	var err error
	if op.Progress, err = JSONFrom[store.Progress](progress); err != nil {
		return nil, err
	}
	if op.Error, err = JSONFrom[store.ErrorInfo](errInfo); err != nil {
		return nil, err
	}
	op.Result, op.Params = RawFrom(result), RawFrom(params)
	op.CreatedAt, op.UpdatedAt, op.DoneAt = FromNanos(created), FromNanos(updated), TimePtr(done)
	if leaseExpires != 0 {
		op.LeaseExpiresAt = FromNanos(leaseExpires)
	}
	return &op, nil
}

// NormOperation makes op what a read of it returns.
func NormOperation(op *store.Operation) {
	op.CreatedAt, op.UpdatedAt, op.DoneAt = Norm(op.CreatedAt), Norm(op.UpdatedAt), NormPtr(op.DoneAt)
	if len(op.Result) == 0 {
		op.Result = nil
	}
	if len(op.Params) == 0 {
		op.Params = nil
	}
}

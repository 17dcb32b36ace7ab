package worker

// CheckpointSnapshot is the object-storage name of checkpoint id:
// "checkpoints/<id>". A worker with an object store uploads every
// checkpoint it takes under it, so a branch of the checkpoint, or a
// restore to it, can run on any worker.
func CheckpointSnapshot(id string) string { return "checkpoints/" + id }

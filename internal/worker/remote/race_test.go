//go:build race

package remote_test

// largeFileBytes is the large file's size under the race detector, which
// makes every byte copied many times slower: 16 MiB is still 64 chunks.
const largeFileBytes = 16 << 20

// largePortBytes is what TestDialPortLarge sends each way under the race
// detector: 64 chunks.
const largePortBytes = 4 << 20

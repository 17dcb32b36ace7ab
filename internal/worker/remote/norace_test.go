//go:build !race

package remote_test

// largeFileBytes is the size of the file TestLargeFile sends both ways.
const largeFileBytes = 64 << 20

// largePortBytes is what TestDialPortLarge sends each way.
const largePortBytes = 20 << 20

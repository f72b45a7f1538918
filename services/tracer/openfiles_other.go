//go:build !unix

package tracer

// openFilesLimit bounds the chain files kept open for appending.
func openFilesLimit() int { return 256 }

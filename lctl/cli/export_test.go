package cli

// Reads returns how many chain files commands have read as a stream and
// in full so far.
func Reads() (stream, full int64) { return streamReads.Load(), fullReads.Load() }

// TuneGC is tuneGC.
var TuneGC = tuneGC

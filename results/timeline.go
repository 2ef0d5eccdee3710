package results

// TimelineFile is the run's timeline in Chrome Trace Event format (what
// Perfetto and chrome://tracing open), in the run's directory: every rank a
// process, its computation and communication threads (or streams), the
// measured steps only. Every backend that writes one uses this name and sets
// Result.TimelinePath to it, so `report --timeline` finds it whatever wrote it.
const TimelineFile = "timeline.json"

// MaxTimelineBytes bounds a timeline file (50 MB): a writer keeps fewer events
// rather than more bytes, and says so in the file's metadata (otherData).
const MaxTimelineBytes = 50_000_000

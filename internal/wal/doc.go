// Package wal is idem's write-ahead log: one file of frames that a writer
// appends and syncs, and that an open replays. It knows nothing of what
// the entries mean or where they are applied.
//
// # Format
//
// A header block (4 KiB: magic "idemwal2", generation u64, CRC-32C of the
// 16 bytes before it) is followed by frames, each starting on a 4 KiB
// boundary:
//
//	length u32 | crc32c u32 | generation u64 | sequence u64 | payload
//
// The checksum covers the length and everything after the checksum. The
// payload is a run of entries:
//
//	0x01 | uvarint key length | key | uvarint value length | value | uvarint expiresAt
//	0x02 | uvarint key length | key                                  (a deletion)
//
// Logs of the earlier layout (magic "idemwal1") pack frames end to end;
// they replay as such, and Full reports true until Reset starts the
// current layout. docs/log-format.md has the measurements behind the
// layout.
//
// # Semantics
//
//   - When Commit returns nil, the frame is on disk: written with
//     O_DIRECT|O_DSYNC, or, where the system refuses that, written through
//     the page cache and followed by fdatasync.
//   - Open returns the frames of the current generation, in order. Replay
//     stops at the first frame whose length, checksum, generation or
//     sequence number does not fit: the torn tail of a crash, or a stale
//     frame of an earlier generation that was not overwritten.
//   - A frame whose checksum matches but whose payload cannot be decoded
//     is damage, not a torn tail: Open fails with ErrCorrupt.
//   - Reset starts a new generation: every frame on disk becomes stale.
//     The caller must first make durable whatever it applied the frames to.
//
// # Caveats
//
// One writer at a time; a Log is not safe for concurrent use.
package wal

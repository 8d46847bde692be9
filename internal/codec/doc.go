// Package codec encodes and decodes idem's stored records, format 1, by
// hand and without reflection. The bytes are the msgpack map that
// github.com/vmihailenco/msgpack/v5 writes for a Record from its struct
// tags (docs/record-format.md describes them): stores written before and
// after the codec read each other, and the tests compare the two on
// generated records, byte for byte.
//
// Append writes one form of each value; Decode reads that form fast and
// leaves every other form msgpack reads to msgpack itself, so nothing
// msgpack reads is refused or read differently. Decode refuses, with a
// *CorruptError and never a panic, bytes msgpack cannot read whole, a
// record of format 0 or newer than Format, of an unknown state, or done
// without a result. It does not check keys: that is idem's rule.
//
// Marshal allocates once, the exact size. Decode allocates once for the
// strings and the body together (they stay in memory as one), plus the
// slice of attempts past a single one and the result's header; the record
// itself goes into the caller's Parts, which idem boxes in one allocation.
package codec

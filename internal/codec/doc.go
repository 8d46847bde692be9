// Package codec encodes and decodes idem's stored records, format 1, by
// hand and without reflection. The bytes are the msgpack map that
// github.com/vmihailenco/msgpack/v5 writes for a Record from its struct
// tags (docs/record-format.md describes them): stores written before and
// after the codec read each other, and the tests compare the two on
// generated records, byte for byte.
//
// Append writes one form of each value; Unmarshal reads that form fast and
// leaves every other form msgpack reads to msgpack itself, so nothing
// msgpack reads is refused or read differently. Unmarshal refuses, with a
// *CorruptError and never a panic, bytes msgpack cannot read whole, a
// record of format 0 or newer than Format, of an unknown state, or done
// without a result. It does not check keys: that is idem's rule.
//
// Marshal allocates once, the exact size. Unmarshal allocates once for the
// record, its result and a single attempt (Box), and once for the strings
// and the body together (keeping any of them keeps all of them), plus the
// attempts past a single one and the result's header.
//
// Record, Result and Attempt have the memory layout of idem's types of the
// same names, which idem relies on to use one as the other without a copy.
package codec

//go:build jemalloc && cgo

/*
 * SPDX-FileCopyrightText: © 2017-2025 Istari Digital, Inc.
 * SPDX-License-Identifier: Apache-2.0
 */

package table

// usingJemalloc says z.Calloc allocates with jemalloc, whose memory z.Free
// releases: decoded blocks are freed, not pooled.
const usingJemalloc = true

//go:build !jemalloc || !cgo

/*
 * SPDX-FileCopyrightText: © 2017-2025 Istari Digital, Inc.
 * SPDX-License-Identifier: Apache-2.0
 */

package table

// usingJemalloc says z.Calloc allocates with jemalloc; here it is Go's
// memory, which z.Free leaves to the collector: decoded blocks are pooled.
const usingJemalloc = false

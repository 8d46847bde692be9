// Package fuzz holds fuzz targets over idem's exported API.
package fuzz

// Package migrations is fence's schema as migration files for goose and
// golang-migrate, for applications that run every schema change with their
// own tool instead of calling Store.Migrate. See README.md for the commands.
//
//	goose/<dialect>/NNNN_name.sql                  goose (-- +goose Up / Down)
//	golang-migrate/<dialect>/NNNN_name.up.sql      golang-migrate
//	golang-migrate/<dialect>/NNNN_name.down.sql
//
// where <dialect> is sqlite, postgres or mysql (MySQL 8.0 and MariaDB
// 10.6+). The tables are prefixed fence_, the default of fence.WithPrefix.
// Each Up also records its version in fence_schema, as Migrate does, so
// Store.SchemaVersion reports it and a later Migrate has nothing to do.
//
// The files are generated from the migrations embedded in packages sqlite,
// postgres and mysql by internal/genmigrations; do not edit them. A test
// fails when they are stale.
package migrations

import "embed"

//go:generate go run github.com/fencekit/fence/internal/genmigrations

// FS holds the files, for a program that embeds them instead of copying
// them: fs.Sub(FS, "goose/postgres") is a directory for goose.NewProvider.
//
//go:embed goose golang-migrate
var FS embed.FS

package mysql_test

import (
	"testing"

	"github.com/fencekit/fence/fencetest"
	"github.com/fencekit/fence/internal/teststore"
)

func TestConformance(t *testing.T) {
	fencetest.Run(t, teststore.MySQL.Conformance(t))
}

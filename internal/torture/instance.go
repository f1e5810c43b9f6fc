package torture

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fencekit/fence"
	"github.com/fencekit/fence/fencedsn"
)

// instance is a private database server the harness starts for the restart
// fault, in a temporary directory on a free port, so that killing it never
// touches the machine's shared services that other tests use.
type instance interface {
	// DSN is the fence DSN of database "test" on the instance, over TCP.
	DSN() string
	// Addr is host:port, for the proxy.
	Addr() string
	// Crash kills the server without a clean shutdown.
	Crash() error
	// Start (re)starts it and waits until it accepts connections.
	Start(ctx context.Context) error
	// Close stops it and removes its files.
	Close()
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func newInstance(ctx context.Context, d fence.Dialect) (instance, error) {
	switch d {
	case fence.Postgres:
		return newPGInstance(ctx)
	case fence.MySQL:
		return newMariaInstance(ctx)
	}
	return nil, fmt.Errorf("torture: no private instance for %s", d)
}

// ---------------------------------------------------------------------------
// PostgreSQL: initdb + pg_ctl. PostgreSQL refuses to run as root, so as root
// every command runs as user postgres (runuser) in a directory it owns.

type pgInstance struct {
	bin, dir, data string
	port           int
	asUser         string
}

func pgBinDir() (string, error) {
	if b := os.Getenv("FENCE_TORTURE_PG_BIN"); b != "" {
		return b, nil
	}
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		return filepath.Dir(p), nil
	}
	ms, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
	if len(ms) == 0 {
		return "", errors.New("torture: restart fault needs PostgreSQL's initdb and pg_ctl (not on PATH nor in /usr/lib/postgresql/*/bin; set FENCE_TORTURE_PG_BIN)")
	}
	return filepath.Dir(ms[len(ms)-1]), nil
}

func newPGInstance(ctx context.Context) (*pgInstance, error) {
	bin, err := pgBinDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "fence-torture-pg-")
	if err != nil {
		return nil, err
	}
	in := &pgInstance{bin: bin, dir: dir, data: filepath.Join(dir, "data")}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			os.RemoveAll(dir)
			return nil, errors.New("torture: running as root, and PostgreSQL refuses root: need a user named postgres to run the private instance as")
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		in.asUser = "postgres"
	}
	if in.port, err = freePort(); err != nil {
		in.Close()
		return nil, err
	}
	if out, err := in.run(ctx, "initdb", "-D", in.data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"); err != nil {
		in.Close()
		return nil, fmt.Errorf("torture: initdb: %v\n%s", err, out)
	}
	if err := in.Start(ctx); err != nil {
		in.Close()
		return nil, err
	}
	db, err := fencedsn.Open(ctx, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", in.port))
	if err == nil {
		_, err = db.DB().ExecContext(ctx, "CREATE DATABASE test")
		db.Close()
	}
	if err != nil {
		in.Close()
		return nil, fmt.Errorf("torture: creating database on the private PostgreSQL: %w", err)
	}
	return in, nil
}

func (in *pgInstance) run(ctx context.Context, tool string, args ...string) ([]byte, error) {
	path := filepath.Join(in.bin, tool)
	var cmd *exec.Cmd
	if in.asUser != "" {
		cmd = exec.CommandContext(ctx, "runuser", append([]string{"-u", in.asUser, "--", path}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, path, args...)
	}
	cmd.Dir = in.dir
	return cmd.CombinedOutput()
}

func (in *pgInstance) DSN() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/test?sslmode=disable", in.port)
}
func (in *pgInstance) Addr() string { return fmt.Sprintf("127.0.0.1:%d", in.port) }

func (in *pgInstance) Start(ctx context.Context) error {
	// fsync=off: the fault kills processes, not the machine, so what a
	// commit wrote to the OS survives; synchronous_commit stays on, since
	// WAL still in shared memory would die with the server.
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c max_connections=300 -c fsync=off -c full_page_writes=off -c shared_buffers=64MB", in.port, in.dir)
	out, err := in.run(ctx, "pg_ctl", "-D", in.data, "-l", filepath.Join(in.dir, "server.log"), "-o", opts, "-w", "-t", "60", "start")
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(in.dir, "server.log"))
		return fmt.Errorf("torture: starting the private PostgreSQL: %v\n%s\n%s", err, out, tail(log, 2000))
	}
	return nil
}

// Crash is pg_ctl stop -m immediate: every server process quits at once
// without a checkpoint, and the next start runs crash recovery. (A kill -9
// of the postmaster alone would leave its backends holding shared memory,
// and the next start would refuse to run until they exit.)
func (in *pgInstance) Crash() error {
	out, err := in.run(context.Background(), "pg_ctl", "-D", in.data, "-m", "immediate", "-w", "-t", "60", "stop")
	if err != nil {
		return fmt.Errorf("torture: stopping the private PostgreSQL: %v\n%s", err, out)
	}
	return nil
}

func (in *pgInstance) Close() {
	_, _ = in.run(context.Background(), "pg_ctl", "-D", in.data, "-m", "immediate", "-w", "-t", "30", "stop")
	os.RemoveAll(in.dir)
}

// ---------------------------------------------------------------------------
// MariaDB (or MySQL with mysqld): a temporary datadir, started as a child
// process and killed with SIGKILL.

type mariaInstance struct {
	bin, dir, data, tmp string
	port                int
	cmd                 *exec.Cmd
	done                chan struct{}
}

func newMariaInstance(ctx context.Context) (*mariaInstance, error) {
	server := ""
	for _, c := range []string{"mariadbd", "mysqld", "/usr/sbin/mariadbd", "/usr/sbin/mysqld"} {
		if p, err := exec.LookPath(c); err == nil {
			server = p
			break
		}
	}
	install := ""
	for _, c := range []string{"mariadb-install-db", "mysql_install_db"} {
		if p, err := exec.LookPath(c); err == nil {
			install = p
			break
		}
	}
	if server == "" || install == "" {
		return nil, errors.New("torture: restart fault needs mariadbd and mariadb-install-db on PATH")
	}
	dir, err := os.MkdirTemp("", "fence-torture-maria-")
	if err != nil {
		return nil, err
	}
	in := &mariaInstance{bin: server, dir: dir, data: filepath.Join(dir, "data"), tmp: filepath.Join(dir, "tmp")}
	// A tmpdir of its own: a starting mariadbd deletes every #sql* file in
	// its tmpdir (mysql_rm_tmp_tables), and with the default /tmp that is the
	// shared server's in-flight temporary tables: CI's mysql suite failed with
	// "Error on delete of '/tmp/#sql-update-….MAI' (Errcode: 2)" while this
	// instance restarted in a parallel package.
	if err = os.Mkdir(in.tmp, 0o700); err != nil {
		in.Close()
		return nil, err
	}
	if in.port, err = freePort(); err != nil {
		in.Close()
		return nil, err
	}
	args := []string{"--no-defaults", "--datadir=" + in.data, "--tmpdir=" + in.tmp, "--auth-root-authentication-method=normal", "--skip-test-db"}
	if os.Geteuid() == 0 {
		args = append(args, "--user=root")
	}
	cmd := exec.CommandContext(ctx, install, args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		in.Close()
		return nil, fmt.Errorf("torture: mariadb-install-db: %v\n%s", err, tail(out, 2000))
	}
	if err := in.Start(ctx); err != nil {
		in.Close()
		return nil, err
	}
	// Over the socket root needs no password; TCP logins from 127.0.0.1
	// (the proxy) need their own account.
	db, err := fencedsn.Open(ctx, "mysql://root@localhost/mysql?socket="+in.sock())
	if err == nil {
		for _, q := range []string{
			"CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY ''",
			"GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION",
			"CREATE DATABASE IF NOT EXISTS test CHARACTER SET utf8mb4",
		} {
			if _, err = db.DB().ExecContext(ctx, q); err != nil {
				break
			}
		}
		db.Close()
	}
	if err != nil {
		in.Close()
		return nil, fmt.Errorf("torture: preparing the private MariaDB: %w", err)
	}
	return in, nil
}

func (in *mariaInstance) sock() string { return filepath.Join(in.dir, "mysqld.sock") }

func (in *mariaInstance) DSN() string  { return fmt.Sprintf("mysql://root@127.0.0.1:%d/test", in.port) }
func (in *mariaInstance) Addr() string { return fmt.Sprintf("127.0.0.1:%d", in.port) }

func (in *mariaInstance) Start(ctx context.Context) error {
	args := []string{"--no-defaults", "--datadir=" + in.data, "--tmpdir=" + in.tmp, fmt.Sprintf("--port=%d", in.port),
		"--bind-address=127.0.0.1", "--socket=" + in.sock(), "--pid-file=" + filepath.Join(in.dir, "mysqld.pid"),
		"--log-error=" + filepath.Join(in.dir, "error.log"), "--skip-name-resolve", "--skip-log-bin",
		"--max-connections=400", "--innodb-buffer-pool-size=64M",
		// The fault kills the process, not the machine: a commit written to
		// the OS survives, so flushing the log per commit is not needed.
		"--innodb-flush-log-at-trx-commit=2"}
	if os.Geteuid() == 0 {
		args = append(args, "--user=root")
	}
	cmd := exec.Command(in.bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // not killed by the terminal's ^C before cleanup
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("torture: starting the private MariaDB: %w", err)
	}
	in.cmd = cmd
	in.done = make(chan struct{})
	go func(c *exec.Cmd, done chan struct{}) { _ = c.Wait(); close(done) }(cmd, in.done)
	deadline := time.Now().Add(60 * time.Second)
	for {
		c, err := net.DialTimeout("unix", in.sock(), time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-in.done:
			log, _ := os.ReadFile(filepath.Join(in.dir, "error.log"))
			return fmt.Errorf("torture: the private MariaDB exited at start:\n%s", tail(log, 2000))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return errors.New("torture: the private MariaDB did not come up in 60s")
		}
	}
}

func (in *mariaInstance) Crash() error {
	if in.cmd == nil || in.cmd.Process == nil {
		return nil
	}
	_ = in.cmd.Process.Signal(syscall.SIGKILL)
	<-in.done
	in.cmd = nil
	os.Remove(in.sock())
	return nil
}

func (in *mariaInstance) Close() {
	_ = in.Crash()
	os.RemoveAll(in.dir)
}

func tail(b []byte, n int) string {
	s := strings.TrimSpace(string(b))
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

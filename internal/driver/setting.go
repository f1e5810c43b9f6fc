package driver

// SettingError is a connection setting that breaks what fence relies on
// (autocommit off, a read-only session, …), found on a handle the caller
// gave or refused in a DSN. The message names the setting and the fix; the
// root package wraps it in ErrInvalid.
type SettingError struct{ Msg string }

func (e *SettingError) Error() string { return e.Msg }

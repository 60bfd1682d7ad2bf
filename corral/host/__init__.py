"""The host's work around each call, between the public API and the sandbox: a
call's steps (`flow`), what a sandbox keeps of its calls (`ledger`), what a call
may cost (`quota`), remembered approvals (`grants`) and the calls in flight
(`lifecycle`). Nothing here opens a workspace path."""

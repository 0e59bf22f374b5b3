package fault

// Cause is the account of a failure that may go anywhere: to the caller
// (a problem's detail), to the log line of the failure and to its audit
// record. Text is a fixed phrase naming the kind of failure ("connection
// refused by the upstream", "TLS: certificate signed by unknown
// authority", "the issuer answered 401"), never a host name, a URL, a
// path or a value. Err is the error of its kind (a sentinel such as
// upstream.ErrUpstream: errors.Is and Find reach it); From, when set, is
// the error it explains (errors.As reaches it). A Cause's text is Text
// alone: neither Err's nor From's text is ever printed through it.
type Cause struct {
	Text string
	Err  error
	From error
}

func (c *Cause) Error() string { return c.Text }

func (c *Cause) Unwrap() []error {
	if c.From == nil {
		return []error{c.Err}
	}
	return []error{c.Err, c.From}
}

// Because is a Cause of kind err (its sentinel) explained by text; from is
// the error it explains, or nil.
func Because(err error, text string, from error) *Cause {
	return &Cause{Text: text, Err: err, From: from}
}

// CauseOf is the text of the outermost Cause err carries (wrapped or
// joined, at any depth) of the kind that decides err's answer (Of), or ""
// (a cause of another kind explains another error).
func CauseOf(err error) string {
	return causeOf(err, Of(err))
}

func causeOf(err error, k Kind) string {
	for err != nil {
		switch e := err.(type) {
		case *Cause:
			if Of(e.Err) == k {
				return e.Text
			}
		}
		switch e := err.(type) {
		case interface{ Unwrap() []error }:
			for _, x := range e.Unwrap() {
				if t := causeOf(x, k); t != "" {
					return t
				}
			}
			return ""
		case interface{ Unwrap() error }:
			err = e.Unwrap()
		default:
			return ""
		}
	}
	return ""
}

// Reason is what may be said of err in a log line or an audit record: its
// Cause's text; else the message of the error that decides its kind (a
// sentinel's fixed text); else "internal error".
func Reason(err error) string {
	if t := CauseOf(err); t != "" {
		return t
	}
	if f := Find(err); f != nil && f.Msg != "" {
		return f.Msg
	}
	return "internal error"
}

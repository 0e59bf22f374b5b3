package awscred

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/airlock-broker/airlock/internal/grants"
	"github.com/airlock-broker/airlock/internal/upstream"
)

var _ upstream.Minter = (*STSScoped)(nil)

// STSScoped mints per session, through sts:AssumeRole, credentials scoped
// to the session's grant (assume_role with scope_to_grant): an inline
// session policy allowing exactly the actions and resources of the
// session's AWS rules, for the session's remaining life (clamped to STS's
// 15-minute minimum and the role's maximum), so that AWS itself refuses
// anything the grant does not allow. STS credentials cannot be revoked:
// Revoke does nothing and they end at their own expiry, which is the
// session's, or up to 15 minutes after a shorter session's end.
type STSScoped struct {
	client  *sts.Client
	roleARN string
	maxDur  time.Duration
	desc    string
}

// DefaultSTSMaxDuration is a role's default maximum session duration.
const DefaultSTSMaxDuration = time.Hour

// NewSTSScoped assumes roleARN with base credentials through STS at
// endpoint (or the regional one); maxDuration is the role's maximum
// session duration (0: DefaultSTSMaxDuration).
func NewSTSScoped(base upstream.AWSCredentialsProvider, region, roleARN, endpoint string, maxDuration time.Duration, desc string) *STSScoped {
	opts := sts.Options{Region: region, Credentials: toSDK(base)}
	if endpoint != "" {
		opts.BaseEndpoint = aws.String(endpoint)
	}
	if maxDuration <= 0 {
		maxDuration = DefaultSTSMaxDuration
	}
	return &STSScoped{client: sts.New(opts), roleARN: roleARN, maxDur: maxDuration, desc: desc + " assume " + roleARN + " scoped to grant"}
}

// Describe implements upstream.Minter.
func (m *STSScoped) Describe() string { return m.desc }

// STSDuration is the duration asked of STS for a session with remaining
// life left: at least STS's minimum, at most the role's maximum.
func STSDuration(remaining, maxDur time.Duration) time.Duration {
	d := min(remaining.Truncate(time.Second), maxDur)
	return max(d, upstream.MinSTSDuration)
}

// Mint implements upstream.Minter.
func (m *STSScoped) Mint(ctx context.Context, sc upstream.Scope) (upstream.Lease, error) {
	policy, err := SessionPolicy(sc.Rules)
	if err != nil {
		return upstream.Lease{}, fmt.Errorf("%s: %w", m.desc, err)
	}
	dur := STSDuration(sc.Remaining(), m.maxDur)
	out, err := m.client.AssumeRole(ctx, &sts.AssumeRoleInput{
		RoleArn: aws.String(m.roleARN), RoleSessionName: aws.String(stsSessionName(sc.SessionID)),
		Policy: aws.String(policy), DurationSeconds: aws.Int32(int32(dur / time.Second)),
	})
	if err != nil {
		return upstream.Lease{}, fmt.Errorf("%s: AssumeRole failed: %s", m.desc, awsErrorCode(err))
	}
	c := out.Credentials
	if c == nil || aws.ToString(c.AccessKeyId) == "" || aws.ToString(c.SecretAccessKey) == "" {
		return upstream.Lease{}, fmt.Errorf("%s: AssumeRole returned no credentials", m.desc)
	}
	l := upstream.Lease{Secret: upstream.NewSecret(aws.ToString(c.SecretAccessKey)), ID: aws.ToString(c.AccessKeyId),
		AWS: upstream.AWSCredentials{AccessKeyID: aws.ToString(c.AccessKeyId), SecretAccessKey: aws.ToString(c.SecretAccessKey),
			SessionToken: aws.ToString(c.SessionToken), Source: m.desc}}
	// The lease ends by the broker's clock: the duration asked from the mint.
	l.Expires = sc.Now.Add(dur)
	l.AWS.CanExpire, l.AWS.Expires = true, l.Expires
	if l.AWS.SessionToken != "" {
		l.Extra = []upstream.Secret{upstream.NewSecret(l.AWS.SessionToken)}
	}
	return l, nil
}

// Renew implements upstream.Minter: STS credentials are minted anew.
func (m *STSScoped) Renew(ctx context.Context, sc upstream.Scope, _ upstream.Lease) (upstream.Lease, error) {
	return m.Mint(ctx, sc)
}

// Revoke implements upstream.Minter: STS credentials cannot be revoked one by one;
// they end at their expiry.
func (m *STSScoped) Revoke(context.Context, upstream.Lease) error { return nil }

// stsSessionName is the RoleSessionName of a session (CloudTrail shows it):
// [\w+=,.@-]{2,64}.
func stsSessionName(id string) string {
	n := "airlock-" + id
	n = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_+=,.@-", r) {
			return r
		}
		return '-'
	}, n)
	return n[:min(len(n), 64)]
}

// maxSessionPolicy is STS's limit on an inline session policy's length.
const maxSessionPolicy = 2048

// SessionPolicy is the inline IAM session policy allowing exactly the
// actions and resources of rules (their AWS rules; HTTP rules carry none):
// one statement per resource, its actions sorted and deduplicated (IAM
// actions are case-insensitive). Grant
// globs are IAM's ("*" any run, "?" one character) and are kept; a "$"
// is escaped as ${$} so that no policy variable is read into a resource.
// No AWS rule, or a policy past STS's 2048 characters, is an error (the
// credential is not minted: fail closed).
func SessionPolicy(rules []grants.Rule) (string, error) {
	byRes := map[string][]string{}
	var order []string
	for _, r := range rules {
		if r.Action == "" || r.Resource == "" {
			continue
		}
		res := strings.ReplaceAll(r.Resource, "$", "${$}")
		if _, ok := byRes[res]; !ok {
			order = append(order, res)
		}
		if !slices.ContainsFunc(byRes[res], func(a string) bool { return strings.EqualFold(a, r.Action) }) {
			byRes[res] = append(byRes[res], r.Action)
		}
	}
	if len(order) == 0 {
		return "", errors.New("the session has no AWS rule to scope a credential to")
	}
	slices.Sort(order)
	type statement struct {
		Effect   string
		Action   []string
		Resource string
	}
	doc := struct {
		Version   string
		Statement []statement
	}{Version: "2012-10-17"}
	for _, res := range order {
		acts := byRes[res]
		slices.Sort(acts)
		doc.Statement = append(doc.Statement, statement{Effect: "Allow", Action: acts, Resource: res})
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return "", err
	}
	if len(b) > maxSessionPolicy {
		return "", fmt.Errorf("the session policy is %d characters, past STS's %d", len(b), maxSessionPolicy)
	}
	return string(b), nil
}

// awsErrorCode names an AWS API error for operators by its code and HTTP
// status (AccessDenied, PackedPolicyTooLarge, ValidationError...), never
// its message, which may quote the request; "unreachable" when AWS gave
// no answer.
func awsErrorCode(err error) string {
	var apiErr smithy.APIError
	if !errors.As(err, &apiErr) {
		return "unreachable"
	}
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) {
		return fmt.Sprintf("%s (status %d)", apiErr.ErrorCode(), re.HTTPStatusCode())
	}
	return apiErr.ErrorCode()
}

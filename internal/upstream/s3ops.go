package upstream

import (
	"bytes"
	"net/http"
	"net/url"
	"strings"
)

// S3's operations as IAM names them ("Required permissions for Amazon S3 API
// operations", S3 User Guide). A request is named by its method, whether
// it addresses the service, a bucket or an object, and its one
// sub-resource query key; every other query key must be an ordinary
// parameter. Anything else is refused: an operation the broker cannot
// name is never mapped to a neighbour.

// s3Action is the IAM action of one method on one sub-resource; version is the
// action when the request names an object version (?versionId=).
type s3Action struct{ action, version string }

// s3Bucket: sub-resource key → method → action, for /bucket requests. The
// empty key is the bucket itself.
var s3Bucket = map[string]map[string]string{
	"":                    {"GET": "s3:ListBucket", "HEAD": "s3:ListBucket", "PUT": "s3:CreateBucket", "DELETE": "s3:DeleteBucket"},
	"accelerate":          {"GET": "s3:GetAccelerateConfiguration", "PUT": "s3:PutAccelerateConfiguration"},
	"acl":                 {"GET": "s3:GetBucketAcl", "PUT": "s3:PutBucketAcl"},
	"analytics":           {"GET": "s3:GetAnalyticsConfiguration", "PUT": "s3:PutAnalyticsConfiguration", "DELETE": "s3:PutAnalyticsConfiguration"},
	"cors":                {"GET": "s3:GetBucketCORS", "PUT": "s3:PutBucketCORS", "DELETE": "s3:PutBucketCORS"},
	"delete":              {"POST": "s3:DeleteObject"}, // DeleteObjects: on bucket/*, see s3Operation
	"encryption":          {"GET": "s3:GetEncryptionConfiguration", "PUT": "s3:PutEncryptionConfiguration", "DELETE": "s3:PutEncryptionConfiguration"},
	"intelligent-tiering": {"GET": "s3:GetIntelligentTieringConfiguration", "PUT": "s3:PutIntelligentTieringConfiguration", "DELETE": "s3:PutIntelligentTieringConfiguration"},
	"inventory":           {"GET": "s3:GetInventoryConfiguration", "PUT": "s3:PutInventoryConfiguration", "DELETE": "s3:PutInventoryConfiguration"},
	"lifecycle":           {"GET": "s3:GetLifecycleConfiguration", "PUT": "s3:PutLifecycleConfiguration", "DELETE": "s3:PutLifecycleConfiguration"},
	"location":            {"GET": "s3:GetBucketLocation"},
	"logging":             {"GET": "s3:GetBucketLogging", "PUT": "s3:PutBucketLogging"},
	"metrics":             {"GET": "s3:GetMetricsConfiguration", "PUT": "s3:PutMetricsConfiguration", "DELETE": "s3:PutMetricsConfiguration"},
	"notification":        {"GET": "s3:GetBucketNotification", "PUT": "s3:PutBucketNotification"},
	"object-lock":         {"GET": "s3:GetBucketObjectLockConfiguration", "PUT": "s3:PutBucketObjectLockConfiguration"},
	"ownershipControls":   {"GET": "s3:GetBucketOwnershipControls", "PUT": "s3:PutBucketOwnershipControls", "DELETE": "s3:PutBucketOwnershipControls"},
	"policy":              {"GET": "s3:GetBucketPolicy", "PUT": "s3:PutBucketPolicy", "DELETE": "s3:DeleteBucketPolicy"},
	"policyStatus":        {"GET": "s3:GetBucketPolicyStatus"},
	"publicAccessBlock":   {"GET": "s3:GetBucketPublicAccessBlock", "PUT": "s3:PutBucketPublicAccessBlock", "DELETE": "s3:PutBucketPublicAccessBlock"},
	"replication":         {"GET": "s3:GetReplicationConfiguration", "PUT": "s3:PutReplicationConfiguration", "DELETE": "s3:PutReplicationConfiguration"},
	"requestPayment":      {"GET": "s3:GetBucketRequestPayment", "PUT": "s3:PutBucketRequestPayment"},
	"tagging":             {"GET": "s3:GetBucketTagging", "PUT": "s3:PutBucketTagging", "DELETE": "s3:PutBucketTagging"},
	"uploads":             {"GET": "s3:ListBucketMultipartUploads"},
	"versioning":          {"GET": "s3:GetBucketVersioning", "PUT": "s3:PutBucketVersioning"},
	"versions":            {"GET": "s3:ListBucketVersions"},
	"website":             {"GET": "s3:GetBucketWebsite", "PUT": "s3:PutBucketWebsite", "DELETE": "s3:DeleteBucketWebsite"},
}

// s3Object: sub-resource key → method → action, for /bucket/key requests.
var s3Object = map[string]map[string]s3Action{
	"": {"GET": {"s3:GetObject", "s3:GetObjectVersion"}, "HEAD": {"s3:GetObject", "s3:GetObjectVersion"},
		"PUT": {"s3:PutObject", "s3:PutObject"}, "DELETE": {"s3:DeleteObject", "s3:DeleteObjectVersion"}},
	"acl":        {"GET": {"s3:GetObjectAcl", "s3:GetObjectVersionAcl"}, "PUT": {"s3:PutObjectAcl", "s3:PutObjectVersionAcl"}},
	"attributes": {"GET": {"s3:GetObjectAttributes", "s3:GetObjectVersionAttributes"}},
	"legal-hold": {"GET": {"s3:GetObjectLegalHold", "s3:GetObjectLegalHold"}, "PUT": {"s3:PutObjectLegalHold", "s3:PutObjectLegalHold"}},
	"restore":    {"POST": {"s3:RestoreObject", "s3:RestoreObject"}},
	"retention":  {"GET": {"s3:GetObjectRetention", "s3:GetObjectRetention"}, "PUT": {"s3:PutObjectRetention", "s3:PutObjectRetention"}},
	"select":     {"POST": {"s3:GetObject", "s3:GetObjectVersion"}}, // SelectObjectContent
	"tagging": {"GET": {"s3:GetObjectTagging", "s3:GetObjectVersionTagging"}, "PUT": {"s3:PutObjectTagging", "s3:PutObjectVersionTagging"},
		"DELETE": {"s3:DeleteObjectTagging", "s3:DeleteObjectVersionTagging"}},
	"torrent": {"GET": {"s3:GetObjectTorrent", "s3:GetObjectVersionTorrent"}},
	"uploadId": {"PUT": {"s3:PutObject", "s3:PutObject"}, "POST": {"s3:PutObject", "s3:PutObject"}, // UploadPart(Copy), CompleteMultipartUpload
		"GET": {"s3:ListMultipartUploadParts", "s3:ListMultipartUploadParts"}, "DELETE": {"s3:AbortMultipartUpload", "s3:AbortMultipartUpload"}},
	"uploads": {"POST": {"s3:PutObject", "s3:PutObject"}}, // CreateMultipartUpload
}

// s3Service: sub-resource key → method → action, for requests on / (no bucket).
var s3Service = map[string]map[string]string{
	"": {"GET": "s3:ListAllMyBuckets"},
}

// s3Params are the ordinary query parameters: they select within an
// operation, never another operation. versionId is handled apart.
var s3Params = map[string]bool{
	"prefix": true, "delimiter": true, "max-keys": true, "marker": true, "continuation-token": true,
	"list-type": true, "encoding-type": true, "start-after": true, "fetch-owner": true, "key-marker": true,
	"version-id-marker": true, "upload-id-marker": true, "max-uploads": true, "max-parts": true,
	"part-number-marker": true, "partNumber": true, "select-type": true, "id": true, "max-buckets": true,
	"bucket-region": true, "x-id": true, // x-id: the operation name the Go SDK adds; S3 ignores it
	"response-content-type": true, "response-content-language": true, "response-expires": true,
	"response-cache-control": true, "response-content-disposition": true, "response-content-encoding": true,
}

// s3Operation names a path-style S3 request.
func (a *AWS) s3Operation(r AWSRequest) (Op, error) {
	var sub string
	nsub, version := 0, false
	for k, vs := range r.Query {
		if len(vs) > 1 {
			return Op{}, opErr("a query key is given more than once")
		}
		switch {
		case k == "versionId":
			version = true
		case s3Params[k]:
		case s3Bucket[k] != nil || s3Object[k] != nil:
			sub = k
			nsub++
		default:
			return Op{}, opErr("the query holds a key that is neither an S3 sub-resource nor a parameter the broker knows")
		}
	}
	if nsub > 1 {
		return Op{}, opErr("the query names more than one S3 sub-resource")
	}
	if !strings.HasPrefix(r.Path, "/") {
		return Op{}, opErr("the path is not absolute")
	}
	bucket, key, slash := strings.Cut(r.Path[1:], "/")
	if bucket == "" {
		if slash {
			return Op{}, opErr("the path has an empty bucket name")
		}
		act := s3Service[sub][r.Method]
		if act == "" || version {
			return Op{}, opErr("%s %s is not an S3 operation the broker knows", r.Method, what(sub, "the service"))
		}
		return Op{Action: act, Resource: "*", SendPath: "/"}, nil
	}
	if !validBucket(bucket) {
		return Op{}, opErr("the bucket name is not a valid S3 bucket name")
	}
	if key == "" {
		act := s3Bucket[sub][r.Method]
		if act == "" || version {
			return Op{}, opErr("%s %s is not an S3 operation the broker knows", r.Method, what(sub, "a bucket"))
		}
		op := Op{Action: act, Resource: "arn:aws:s3:::" + bucket, SendPath: "/" + s3Escape(bucket)}
		if slash {
			op.SendPath += "/"
		}
		if sub == "delete" {
			// DeleteObjects names its keys in the body: it needs the
			// permission on every object of the bucket.
			op.Resource += "/*"
			if bytes.Contains(r.Body, []byte("VersionId")) {
				op.also("s3:DeleteObjectVersion", op.Resource, "versions named in the body")
			}
		}
		a.s3HeaderPermissions(&op, r.Header, bucket, "", op.Resource)
		return op, nil
	}
	if !a.AllowDotKeys {
		if err := checkSegments(key); err != nil {
			return Op{}, err
		}
	}
	act, ok := s3Object[sub][r.Method]
	if !ok {
		return Op{}, opErr("%s %s is not an S3 operation the broker knows", r.Method, what(sub, "an object"))
	}
	name := act.action
	if version {
		name = act.version
	}
	arn := "arn:aws:s3:::" + bucket + "/" + key
	op := Op{Action: name, Resource: arn, SendPath: "/" + s3Escape(bucket) + "/" + s3Escape(key)}
	if err := a.s3CopySource(&op, r.Header); err != nil {
		return Op{}, err
	}
	a.s3HeaderPermissions(&op, r.Header, bucket, key, arn)
	return op, nil
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

func what(sub, target string) string {
	if sub == "" {
		return "on " + target
	}
	return "?" + sub + " on " + target
}

// also adds a further permission unless it is the operation itself or is
// already listed.
func (op *Op) also(action, resource, because string) {
	if action == op.Action && resource == op.Resource {
		return
	}
	for _, p := range op.Also {
		if p.Action == action && p.Resource == resource {
			return
		}
	}
	op.Also = append(op.Also, Permission{Action: action, Resource: resource, Because: because})
}

// Header flags: which permission-changing headers a request carries.
const (
	hdrACL = 1 << iota
	hdrLockRetention
	hdrLegalHold
	hdrBypass
	hdrTagging
	hdrBucketLock
	hdrOwnership
)

// s3HeaderPermissions adds the permissions that headers imply: they change
// what an operation does, so they need their own permission (IAM's
// "conditionally required" permissions).
func (a *AWS) s3HeaderPermissions(op *Op, h http.Header, bucket, key, resource string) {
	flags := 0
	for k := range h {
		if len(k) < 6 || !strings.EqualFold(k[:6], "x-amz-") {
			continue
		}
		switch n := k[6:]; {
		case strings.EqualFold(n, "acl"), hasPrefixFold(n, "grant-"):
			flags |= hdrACL
		case strings.EqualFold(n, "object-lock-legal-hold"):
			flags |= hdrLegalHold
		case hasPrefixFold(n, "object-lock-"): // -mode, -retain-until-date
			flags |= hdrLockRetention
		case strings.EqualFold(n, "bypass-governance-retention"):
			flags |= hdrBypass
		case strings.EqualFold(n, "tagging"):
			flags |= hdrTagging
		case strings.EqualFold(n, "bucket-object-lock-enabled"):
			flags |= hdrBucketLock
		case strings.EqualFold(n, "object-ownership"):
			flags |= hdrOwnership
		}
	}
	if flags == 0 {
		return
	}
	if key == "" {
		bucketARN := "arn:aws:s3:::" + bucket
		if flags&hdrACL != 0 {
			op.also("s3:PutBucketAcl", bucketARN, "header x-amz-acl or x-amz-grant-*")
		}
		if flags&hdrBucketLock != 0 {
			op.also("s3:PutBucketObjectLockConfiguration", bucketARN, "header x-amz-bucket-object-lock-enabled")
			op.also("s3:PutBucketVersioning", bucketARN, "header x-amz-bucket-object-lock-enabled")
		}
		if flags&hdrOwnership != 0 {
			op.also("s3:PutBucketOwnershipControls", bucketARN, "header x-amz-object-ownership")
		}
	}
	// On a bucket these reach objects (DeleteObjects: bucket/*); on a
	// bucket operation that ignores them they are still refused unless
	// granted, which costs a client nothing it needs.
	if flags&hdrACL != 0 && key != "" {
		op.also("s3:PutObjectAcl", resource, "header x-amz-acl or x-amz-grant-*")
	}
	if flags&hdrLockRetention != 0 {
		op.also("s3:PutObjectRetention", resource, "header x-amz-object-lock-mode or -retain-until-date")
	}
	if flags&hdrLegalHold != 0 {
		op.also("s3:PutObjectLegalHold", resource, "header x-amz-object-lock-legal-hold")
	}
	if flags&hdrBypass != 0 {
		op.also("s3:BypassGovernanceRetention", resource, "header x-amz-bypass-governance-retention")
	}
	if flags&hdrTagging != 0 {
		op.also("s3:PutObjectTagging", resource, "header x-amz-tagging")
	}
}

// s3CopySource adds the read of a copy's source (CopyObject, UploadPartCopy):
// s3:GetObject on it, or s3:GetObjectVersion when it names a version. The
// source's bucket and key are held to the same rules as the request's.
func (a *AWS) s3CopySource(op *Op, h http.Header) error {
	vs := h.Values("X-Amz-Copy-Source")
	if len(vs) == 0 {
		return nil
	}
	if len(vs) > 1 {
		return opErr("x-amz-copy-source is given more than once")
	}
	raw, rawQuery, hasQuery := strings.Cut(vs[0], "?")
	action := "s3:GetObject"
	if hasQuery {
		q, err := url.ParseQuery(rawQuery)
		if err != nil || len(q) != 1 || len(q["versionId"]) != 1 {
			return opErr("x-amz-copy-source may carry only ?versionId=")
		}
		action = "s3:GetObjectVersion"
	}
	src, err := url.PathUnescape(strings.TrimPrefix(raw, "/"))
	if err != nil || strings.ContainsRune(src, 0) {
		return opErr("x-amz-copy-source is not a valid bucket/key")
	}
	bucket, key, _ := strings.Cut(src, "/")
	if !validBucket(bucket) || key == "" {
		return opErr("x-amz-copy-source is not a valid bucket/key")
	}
	if !a.AllowDotKeys {
		if why := segmentFault(key); why != "" {
			return opErr("the key of x-amz-copy-source %s", why)
		}
	}
	op.also(action, "arn:aws:s3:::"+bucket+"/"+key, "header x-amz-copy-source")
	return nil
}

// validBucket accepts S3 bucket names, legacy ones included (upper case and
// underscores), and nothing that could read as a path, an ARN or a glob.
func validBucket(b string) bool {
	if len(b) == 0 || len(b) > 255 || b == "." || b == ".." {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// checkSegments refuses a decoded key (or path) with a "." or ".."
// segment, also when that segment is percent-encoded once more ("%2E%2E",
// which a server that decodes twice reads as ".."), and with an empty
// segment ("a//b", or a leading "/"). Backslashes count as separators too:
// some servers read them so. A trailing "/" (a "folder" key) is allowed.
func checkSegments(key string) error {
	if why := segmentFault(key); why != "" {
		return opErr("the key %s", why)
	}
	return nil
}

func segmentFault(key string) string {
	start := 0
	for i := 0; i <= len(key); i++ {
		if i < len(key) && key[i] != '/' && key[i] != '\\' {
			continue
		}
		seg := key[start:i]
		if seg == "" && i < len(key) {
			return "has an empty path segment"
		}
		if isDotSegment(seg) {
			return `has a "." or ".." segment`
		}
		start = i + 1
	}
	return ""
}

// isDotSegment: ".", "..", or either with its dots percent-encoded (once
// more than the path was already decoded).
func isDotSegment(seg string) bool {
	if len(seg) > 6 || seg == "" {
		return false
	}
	if seg == "." || seg == ".." {
		return true
	}
	if !strings.Contains(seg, "%") {
		return false
	}
	d, err := url.PathUnescape(seg)
	return err == nil && (d == "." || d == "..")
}

// s3Escape escapes a decoded bucket or key for the path of the request to
// send, as the SDKs do: everything but unreserved characters and "/".
// The upstream decodes it back to exactly the checked string.
func s3Escape(s string) string {
	const hex = "0123456789ABCDEF"
	n := 0
	for i := 0; i < len(s); i++ {
		if !s3Unreserved(s[i]) {
			n++
		}
	}
	if n == 0 {
		return s
	}
	b := make([]byte, 0, len(s)+2*n)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if s3Unreserved(c) {
			b = append(b, c)
			continue
		}
		b = append(b, '%', hex[c>>4], hex[c&15])
	}
	return string(b)
}

func s3Unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~' || c == '/'
}

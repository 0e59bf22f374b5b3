package upstream

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestS3Operation(t *testing.T) {
	a := &AWS{Service: "s3", Region: "us-east-1"}
	obj := "arn:aws:s3:::reports/t-42/a.csv"
	bkt := "arn:aws:s3:::reports"
	tests := []struct {
		name           string
		method, path   string
		query          string
		header         http.Header
		body           string
		want           Op // SendPath checked apart
		wantErr        bool
		wantSendPath   string
		allowDotKeysOK bool // still refused with allow_dot_keys? (false: allowed then)
	}{
		{name: "list buckets", method: "GET", path: "/", want: Op{Action: "s3:ListAllMyBuckets", Resource: "*"}},
		{name: "list objects v2", method: "GET", path: "/reports", query: "list-type=2&prefix=t-42/&x-id=ListObjectsV2", want: Op{Action: "s3:ListBucket", Resource: bkt}},
		{name: "head bucket", method: "HEAD", path: "/reports", want: Op{Action: "s3:ListBucket", Resource: bkt}},
		{name: "create bucket", method: "PUT", path: "/reports", want: Op{Action: "s3:CreateBucket", Resource: bkt}},
		{name: "delete bucket", method: "DELETE", path: "/reports", want: Op{Action: "s3:DeleteBucket", Resource: bkt}},
		{name: "delete objects", method: "POST", path: "/reports", query: "delete", want: Op{Action: "s3:DeleteObject", Resource: bkt + "/*"}},
		{name: "delete object versions", method: "POST", path: "/reports", query: "delete", body: "<Delete><Object><Key>a</Key><VersionId>v</VersionId></Object></Delete>",
			want: Op{Action: "s3:DeleteObject", Resource: bkt + "/*", Also: []Permission{{Action: "s3:DeleteObjectVersion", Resource: bkt + "/*"}}}},
		{name: "bucket acl get", method: "GET", path: "/reports", query: "acl", want: Op{Action: "s3:GetBucketAcl", Resource: bkt}},
		{name: "bucket acl put", method: "PUT", path: "/reports", query: "acl", want: Op{Action: "s3:PutBucketAcl", Resource: bkt}},
		{name: "bucket policy put", method: "PUT", path: "/reports", query: "policy", want: Op{Action: "s3:PutBucketPolicy", Resource: bkt}},
		{name: "bucket policy delete", method: "DELETE", path: "/reports", query: "policy", want: Op{Action: "s3:DeleteBucketPolicy", Resource: bkt}},
		{name: "bucket policy status", method: "GET", path: "/reports", query: "policyStatus", want: Op{Action: "s3:GetBucketPolicyStatus", Resource: bkt}},
		{name: "bucket cors delete", method: "DELETE", path: "/reports", query: "cors", want: Op{Action: "s3:PutBucketCORS", Resource: bkt}},
		{name: "bucket lifecycle put", method: "PUT", path: "/reports", query: "lifecycle", want: Op{Action: "s3:PutLifecycleConfiguration", Resource: bkt}},
		{name: "bucket encryption delete", method: "DELETE", path: "/reports", query: "encryption", want: Op{Action: "s3:PutEncryptionConfiguration", Resource: bkt}},
		{name: "bucket versioning put", method: "PUT", path: "/reports", query: "versioning", want: Op{Action: "s3:PutBucketVersioning", Resource: bkt}},
		{name: "bucket website", method: "DELETE", path: "/reports", query: "website", want: Op{Action: "s3:DeleteBucketWebsite", Resource: bkt}},
		{name: "bucket logging", method: "PUT", path: "/reports", query: "logging", want: Op{Action: "s3:PutBucketLogging", Resource: bkt}},
		{name: "bucket notification", method: "PUT", path: "/reports", query: "notification", want: Op{Action: "s3:PutBucketNotification", Resource: bkt}},
		{name: "bucket replication", method: "PUT", path: "/reports", query: "replication", want: Op{Action: "s3:PutReplicationConfiguration", Resource: bkt}},
		{name: "bucket tagging", method: "DELETE", path: "/reports", query: "tagging", want: Op{Action: "s3:PutBucketTagging", Resource: bkt}},
		{name: "bucket request payment", method: "PUT", path: "/reports", query: "requestPayment", want: Op{Action: "s3:PutBucketRequestPayment", Resource: bkt}},
		{name: "bucket accelerate", method: "PUT", path: "/reports", query: "accelerate", want: Op{Action: "s3:PutAccelerateConfiguration", Resource: bkt}},
		{name: "bucket public access block", method: "DELETE", path: "/reports", query: "publicAccessBlock", want: Op{Action: "s3:PutBucketPublicAccessBlock", Resource: bkt}},
		{name: "bucket ownership", method: "PUT", path: "/reports", query: "ownershipControls", want: Op{Action: "s3:PutBucketOwnershipControls", Resource: bkt}},
		{name: "bucket object lock", method: "PUT", path: "/reports", query: "object-lock", want: Op{Action: "s3:PutBucketObjectLockConfiguration", Resource: bkt}},
		{name: "bucket inventory", method: "PUT", path: "/reports", query: "inventory&id=x", want: Op{Action: "s3:PutInventoryConfiguration", Resource: bkt}},
		{name: "bucket analytics", method: "GET", path: "/reports", query: "analytics&id=x", want: Op{Action: "s3:GetAnalyticsConfiguration", Resource: bkt}},
		{name: "bucket metrics", method: "DELETE", path: "/reports", query: "metrics&id=x", want: Op{Action: "s3:PutMetricsConfiguration", Resource: bkt}},
		{name: "bucket intelligent tiering", method: "PUT", path: "/reports", query: "intelligent-tiering&id=x", want: Op{Action: "s3:PutIntelligentTieringConfiguration", Resource: bkt}},
		{name: "bucket location", method: "GET", path: "/reports", query: "location", want: Op{Action: "s3:GetBucketLocation", Resource: bkt}},
		{name: "bucket uploads", method: "GET", path: "/reports", query: "uploads", want: Op{Action: "s3:ListBucketMultipartUploads", Resource: bkt}},
		{name: "bucket versions", method: "GET", path: "/reports", query: "versions&prefix=t-42/", want: Op{Action: "s3:ListBucketVersions", Resource: bkt}},
		{name: "create bucket with acl", method: "PUT", path: "/reports", header: http.Header{"X-Amz-Acl": {"public-read"}},
			want: Op{Action: "s3:CreateBucket", Resource: bkt, Also: []Permission{{Action: "s3:PutBucketAcl", Resource: bkt}}}},
		{name: "create bucket with object lock", method: "PUT", path: "/reports", header: http.Header{"X-Amz-Bucket-Object-Lock-Enabled": {"true"}, "X-Amz-Object-Ownership": {"ObjectWriter"}},
			want: Op{Action: "s3:CreateBucket", Resource: bkt, Also: []Permission{{Action: "s3:PutBucketObjectLockConfiguration", Resource: bkt},
				{Action: "s3:PutBucketVersioning", Resource: bkt}, {Action: "s3:PutBucketOwnershipControls", Resource: bkt}}}},
		{name: "delete objects bypassing governance", method: "POST", path: "/reports", query: "delete", header: http.Header{"X-Amz-Bypass-Governance-Retention": {"true"}},
			want: Op{Action: "s3:DeleteObject", Resource: bkt + "/*", Also: []Permission{{Action: "s3:BypassGovernanceRetention", Resource: bkt + "/*"}}}},

		{name: "get object", method: "GET", path: "/reports/t-42/a.csv", query: "x-id=GetObject&response-content-type=text/plain", want: Op{Action: "s3:GetObject", Resource: obj}},
		{name: "get object version", method: "GET", path: "/reports/t-42/a.csv", query: "versionId=v1", want: Op{Action: "s3:GetObjectVersion", Resource: obj}},
		{name: "head object", method: "HEAD", path: "/reports/t-42/a.csv", want: Op{Action: "s3:GetObject", Resource: obj}},
		{name: "head object version", method: "HEAD", path: "/reports/t-42/a.csv", query: "versionId=v1", want: Op{Action: "s3:GetObjectVersion", Resource: obj}},
		{name: "get object part", method: "GET", path: "/reports/t-42/a.csv", query: "partNumber=2", want: Op{Action: "s3:GetObject", Resource: obj}},
		{name: "put object", method: "PUT", path: "/reports/t-42/a.csv", query: "x-id=PutObject", want: Op{Action: "s3:PutObject", Resource: obj}},
		{name: "delete object", method: "DELETE", path: "/reports/t-42/a.csv", want: Op{Action: "s3:DeleteObject", Resource: obj}},
		{name: "delete object version", method: "DELETE", path: "/reports/t-42/a.csv", query: "versionId=v1", want: Op{Action: "s3:DeleteObjectVersion", Resource: obj}},
		{name: "object acl get", method: "GET", path: "/reports/t-42/a.csv", query: "acl", want: Op{Action: "s3:GetObjectAcl", Resource: obj}},
		{name: "object acl put", method: "PUT", path: "/reports/t-42/a.csv", query: "acl", header: http.Header{"X-Amz-Acl": {"public-read"}}, want: Op{Action: "s3:PutObjectAcl", Resource: obj}},
		{name: "object version acl put", method: "PUT", path: "/reports/t-42/a.csv", query: "acl&versionId=v1", want: Op{Action: "s3:PutObjectVersionAcl", Resource: obj}},
		{name: "object tagging get", method: "GET", path: "/reports/t-42/a.csv", query: "tagging", want: Op{Action: "s3:GetObjectTagging", Resource: obj}},
		{name: "object tagging put", method: "PUT", path: "/reports/t-42/a.csv", query: "tagging", want: Op{Action: "s3:PutObjectTagging", Resource: obj}},
		{name: "object tagging delete", method: "DELETE", path: "/reports/t-42/a.csv", query: "tagging", want: Op{Action: "s3:DeleteObjectTagging", Resource: obj}},
		{name: "object version tagging delete", method: "DELETE", path: "/reports/t-42/a.csv", query: "tagging&versionId=v", want: Op{Action: "s3:DeleteObjectVersionTagging", Resource: obj}},
		{name: "object retention get", method: "GET", path: "/reports/t-42/a.csv", query: "retention", want: Op{Action: "s3:GetObjectRetention", Resource: obj}},
		{name: "object retention put", method: "PUT", path: "/reports/t-42/a.csv", query: "retention", want: Op{Action: "s3:PutObjectRetention", Resource: obj}},
		{name: "object retention put bypassing governance", method: "PUT", path: "/reports/t-42/a.csv", query: "retention", header: http.Header{"X-Amz-Bypass-Governance-Retention": {"true"}},
			want: Op{Action: "s3:PutObjectRetention", Resource: obj, Also: []Permission{{Action: "s3:BypassGovernanceRetention", Resource: obj}}}},
		{name: "object legal hold get", method: "GET", path: "/reports/t-42/a.csv", query: "legal-hold", want: Op{Action: "s3:GetObjectLegalHold", Resource: obj}},
		{name: "object legal hold put", method: "PUT", path: "/reports/t-42/a.csv", query: "legal-hold", want: Op{Action: "s3:PutObjectLegalHold", Resource: obj}},
		{name: "object restore", method: "POST", path: "/reports/t-42/a.csv", query: "restore", want: Op{Action: "s3:RestoreObject", Resource: obj}},
		{name: "object select", method: "POST", path: "/reports/t-42/a.csv", query: "select&select-type=2", want: Op{Action: "s3:GetObject", Resource: obj}},
		{name: "object torrent", method: "GET", path: "/reports/t-42/a.csv", query: "torrent", want: Op{Action: "s3:GetObjectTorrent", Resource: obj}},
		{name: "object attributes", method: "GET", path: "/reports/t-42/a.csv", query: "attributes", want: Op{Action: "s3:GetObjectAttributes", Resource: obj}},
		{name: "object version attributes", method: "GET", path: "/reports/t-42/a.csv", query: "attributes&versionId=v", want: Op{Action: "s3:GetObjectVersionAttributes", Resource: obj}},
		{name: "create multipart upload", method: "POST", path: "/reports/t-42/a.csv", query: "uploads", want: Op{Action: "s3:PutObject", Resource: obj}},
		{name: "upload part", method: "PUT", path: "/reports/t-42/a.csv", query: "partNumber=1&uploadId=u", want: Op{Action: "s3:PutObject", Resource: obj}},
		{name: "complete multipart upload", method: "POST", path: "/reports/t-42/a.csv", query: "uploadId=u", want: Op{Action: "s3:PutObject", Resource: obj}},
		{name: "list parts", method: "GET", path: "/reports/t-42/a.csv", query: "uploadId=u&max-parts=10", want: Op{Action: "s3:ListMultipartUploadParts", Resource: obj}},
		{name: "abort multipart upload", method: "DELETE", path: "/reports/t-42/a.csv", query: "uploadId=u", want: Op{Action: "s3:AbortMultipartUpload", Resource: obj}},

		{name: "put object with canned acl", method: "PUT", path: "/reports/t-42/a.csv", header: http.Header{"X-Amz-Acl": {"public-read"}},
			want: Op{Action: "s3:PutObject", Resource: obj, Also: []Permission{{Action: "s3:PutObjectAcl", Resource: obj}}}},
		{name: "put object with a grant header", method: "PUT", path: "/reports/t-42/a.csv", header: http.Header{"X-Amz-Grant-Read": {"uri=http://acs.amazonaws.com/groups/global/AllUsers"}},
			want: Op{Action: "s3:PutObject", Resource: obj, Also: []Permission{{Action: "s3:PutObjectAcl", Resource: obj}}}},
		{name: "put object with retention", method: "PUT", path: "/reports/t-42/a.csv", header: http.Header{"X-Amz-Object-Lock-Mode": {"COMPLIANCE"}, "X-Amz-Object-Lock-Retain-Until-Date": {"2099-01-01T00:00:00Z"}},
			want: Op{Action: "s3:PutObject", Resource: obj, Also: []Permission{{Action: "s3:PutObjectRetention", Resource: obj}}}},
		{name: "put object with legal hold", method: "PUT", path: "/reports/t-42/a.csv", header: http.Header{"X-Amz-Object-Lock-Legal-Hold": {"ON"}},
			want: Op{Action: "s3:PutObject", Resource: obj, Also: []Permission{{Action: "s3:PutObjectLegalHold", Resource: obj}}}},
		{name: "put object with tags", method: "PUT", path: "/reports/t-42/a.csv", header: http.Header{"X-Amz-Tagging": {"a=b"}},
			want: Op{Action: "s3:PutObject", Resource: obj, Also: []Permission{{Action: "s3:PutObjectTagging", Resource: obj}}}},
		{name: "delete object bypassing governance", method: "DELETE", path: "/reports/t-42/a.csv", query: "versionId=v", header: http.Header{"X-Amz-Bypass-Governance-Retention": {"true"}},
			want: Op{Action: "s3:DeleteObjectVersion", Resource: obj, Also: []Permission{{Action: "s3:BypassGovernanceRetention", Resource: obj}}}},
		{name: "create multipart upload with acl", method: "POST", path: "/reports/t-42/a.csv", query: "uploads", header: http.Header{"X-Amz-Acl": {"public-read"}},
			want: Op{Action: "s3:PutObject", Resource: obj, Also: []Permission{{Action: "s3:PutObjectAcl", Resource: obj}}}},
		{name: "copy object", method: "PUT", path: "/reports/t-42/a.csv", header: http.Header{"X-Amz-Copy-Source": {"/secret/b%20c.csv"}},
			want: Op{Action: "s3:PutObject", Resource: obj, Also: []Permission{{Action: "s3:GetObject", Resource: "arn:aws:s3:::secret/b c.csv"}}}},
		{name: "copy object version", method: "PUT", path: "/reports/t-42/a.csv", header: http.Header{"X-Amz-Copy-Source": {"secret/b.csv?versionId=v1"}},
			want: Op{Action: "s3:PutObject", Resource: obj, Also: []Permission{{Action: "s3:GetObjectVersion", Resource: "arn:aws:s3:::secret/b.csv"}}}},
		{name: "copy source with an encoded ?", method: "PUT", path: "/reports/t-42/a.csv", header: http.Header{"X-Amz-Copy-Source": {"reports/t-42/a%3Fb"}},
			want: Op{Action: "s3:PutObject", Resource: obj, Also: []Permission{{Action: "s3:GetObject", Resource: "arn:aws:s3:::reports/t-42/a?b"}}}},
		{name: "upload part copy", method: "PUT", path: "/reports/t-42/a.csv", query: "partNumber=1&uploadId=u", header: http.Header{"X-Amz-Copy-Source": {"reports/t-41/x"}},
			want: Op{Action: "s3:PutObject", Resource: obj, Also: []Permission{{Action: "s3:GetObject", Resource: "arn:aws:s3:::reports/t-41/x"}}}},
		{name: "keys escaped for sending", method: "PUT", path: "/reports/t-42/a b+c%2F?.csv", want: Op{Action: "s3:PutObject", Resource: "arn:aws:s3:::reports/t-42/a b+c%2F?.csv"},
			wantSendPath: "/reports/t-42/a%20b%2Bc%252F%3F.csv"},

		// Refused: an operation the broker cannot name exactly.
		{name: "unknown sub-resource on an object", method: "PUT", path: "/reports/t-42/a.csv", query: "renameObject", wantErr: true},
		{name: "unknown sub-resource on a bucket", method: "GET", path: "/reports", query: "metadataTable", wantErr: true},
		{name: "sub-resource in another case", method: "PUT", path: "/reports/t-42/a.csv", query: "ACL", wantErr: true},
		{name: "parameter in another case", method: "GET", path: "/reports/t-42/a.csv", query: "VersionId=v", wantErr: true},
		{name: "presign parameters", method: "GET", path: "/reports/t-42/a.csv", query: "X-Amz-Signature=x", wantErr: true},
		{name: "two sub-resources", method: "PUT", path: "/reports/t-42/a.csv", query: "tagging&acl", wantErr: true},
		{name: "sub-resource twice", method: "PUT", path: "/reports/t-42/a.csv", query: "acl&acl", wantErr: true},
		{name: "versionId twice", method: "GET", path: "/reports/t-42/a.csv", query: "versionId=a&versionId=b", wantErr: true},
		{name: "sub-resource with the wrong method", method: "POST", path: "/reports/t-42/a.csv", query: "acl", wantErr: true},
		{name: "object sub-resource on a bucket", method: "PUT", path: "/reports", query: "retention", wantErr: true},
		{name: "bucket sub-resource on an object", method: "PUT", path: "/reports/t-42/a.csv", query: "policy", wantErr: true},
		{name: "versionId on a bucket", method: "DELETE", path: "/reports", query: "versionId=v", wantErr: true},
		{name: "browser POST upload", method: "POST", path: "/reports", wantErr: true},
		{name: "PUT on the service", method: "PUT", path: "/", wantErr: true},
		{name: "bad bucket name", method: "GET", path: "/arn:aws:s3:us-east-1:1:accesspoint/x", wantErr: true},
		{name: "empty bucket", method: "GET", path: "//t-42/a.csv", wantErr: true},
		{name: "copy source twice", method: "PUT", path: "/reports/t-42/a.csv", header: http.Header{"X-Amz-Copy-Source": {"reports/t-42/b", "secret/c"}}, wantErr: true},
		{name: "copy source with another query", method: "PUT", path: "/reports/t-42/a.csv", header: http.Header{"X-Amz-Copy-Source": {"reports/t-42/b?acl"}}, wantErr: true},
		{name: "copy source access point", method: "PUT", path: "/reports/t-42/a.csv", header: http.Header{"X-Amz-Copy-Source": {"arn:aws:s3:us-east-1:1:accesspoint/ap/object/k"}}, wantErr: true},
		{name: "copy source without key", method: "PUT", path: "/reports/t-42/a.csv", header: http.Header{"X-Amz-Copy-Source": {"reports"}}, wantErr: true},

		// Refused unless the upstream sets allow_dot_keys.
		{name: "dot-dot key", method: "GET", path: "/reports/t-42/../t-43/a.csv", wantErr: true, allowDotKeysOK: true},
		{name: "dot key", method: "GET", path: "/reports/t-42/./a.csv", wantErr: true, allowDotKeysOK: true},
		{name: "trailing dot-dot", method: "GET", path: "/reports/t-42/..", wantErr: true, allowDotKeysOK: true},
		{name: "double-encoded dot-dot", method: "GET", path: "/reports/t-42/%2E%2e/t-43/a.csv", wantErr: true, allowDotKeysOK: true},
		{name: "backslash dot-dot", method: "GET", path: `/reports/t-42\..\t-43/a.csv`, wantErr: true, allowDotKeysOK: true},
		{name: "empty segment", method: "GET", path: "/reports/t-42//a.csv", wantErr: true, allowDotKeysOK: true},
		{name: "leading slash in key", method: "GET", path: "/reports//t-42/a.csv", wantErr: true, allowDotKeysOK: true},
		{name: "dot-dot copy source", method: "PUT", path: "/reports/t-42/a.csv", header: http.Header{"X-Amz-Copy-Source": {"reports/t-42/%2E%2E/t-43/b"}}, wantErr: true, allowDotKeysOK: true},
		{name: "folder key", method: "PUT", path: "/reports/t-42/dir/", want: Op{Action: "s3:PutObject", Resource: "arn:aws:s3:::reports/t-42/dir/"}},
		{name: "dots inside a name", method: "GET", path: "/reports/t-42/a..b/...", want: Op{Action: "s3:GetObject", Resource: "arn:aws:s3:::reports/t-42/a..b/..."}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, err := url.ParseQuery(tt.query)
			if err != nil {
				t.Fatal(err)
			}
			h := tt.header
			if h == nil {
				h = http.Header{}
			}
			req := AWSRequest{Method: tt.method, Path: tt.path, Query: q, Header: h, Body: []byte(tt.body)}
			got, err := a.Operation(req)
			if tt.wantErr {
				if !errors.Is(err, ErrAWSOperation) {
					t.Fatalf("got %+v, %v; want ErrAWSOperation", got, err)
				}
				if tt.allowDotKeysOK {
					if _, err := (&AWS{Service: "s3", AllowDotKeys: true}).Operation(req); err != nil {
						t.Fatalf("with allow_dot_keys: %v", err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.wantSendPath != "" && got.SendPath != tt.wantSendPath {
				t.Errorf("SendPath = %q, want %q", got.SendPath, tt.wantSendPath)
			}
			if diff := cmp.Diff(tt.want, got, cmpopts.IgnoreFields(Op{}, "SendPath"), cmpopts.IgnoreFields(Permission{}, "Because"), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
			// What is sent decodes to exactly what was checked.
			if sent, err := url.PathUnescape(got.SendPath); err != nil || sent != tt.path && !(tt.path == "/" && sent == "/") {
				t.Errorf("SendPath %q decodes to %q, checked %q", got.SendPath, sent, tt.path)
			}
		})
	}
}

func TestAWSOperationSelectors(t *testing.T) {
	tests := []struct {
		name    string
		service string
		path    string
		query   string
		header  http.Header
		form    string
		want    string
		wantErr bool
	}{
		{name: "json target", service: "dynamodb", header: http.Header{"X-Amz-Target": {"DynamoDB_20120810.PutItem"}}, want: "dynamodb:PutItem"},
		{name: "query action in the form", service: "sqs", form: "Action=SendMessage&QueueUrl=x", want: "sqs:SendMessage"},
		{name: "query action in the query", service: "sqs", query: "Action=ListQueues", want: "sqs:ListQueues"},
		{name: "no selector", service: "sqs", wantErr: true},
		{name: "two targets", service: "dynamodb", header: http.Header{"X-Amz-Target": {"DynamoDB_20120810.GetItem", "DynamoDB_20120810.DeleteTable"}}, wantErr: true},
		{name: "a target list in one header", service: "dynamodb", header: http.Header{"X-Amz-Target": {"DynamoDB_20120810.GetItem,DynamoDB_20120810.DeleteTable"}}, wantErr: true},
		{name: "target without operation", service: "dynamodb", header: http.Header{"X-Amz-Target": {"GetItem"}}, wantErr: true},
		{name: "target and action", service: "sqs", header: http.Header{"X-Amz-Target": {"AmazonSQS.ReceiveMessage"}}, form: "Action=DeleteQueue", wantErr: true},
		{name: "action in query and form", service: "sqs", query: "Action=ListQueues", form: "Action=DeleteQueue", wantErr: true},
		{name: "action twice", service: "sqs", form: "Action=ListQueues&Action=DeleteQueue", wantErr: true},
		{name: "action in another case", service: "sqs", form: "Action=ListQueues&action=DeleteQueue", wantErr: true},
		{name: "empty action", service: "sqs", form: "Action=", wantErr: true},
		{name: "action glob", service: "sqs", form: "Action=Delete*", wantErr: true},
		{name: "dot-dot path", service: "sqs", path: "/123/../q", form: "Action=SendMessage", wantErr: true},
		{name: "an operation in a REST path", service: "lambda", path: "/2015-03-31/functions/f/invocations", header: http.Header{"X-Amz-Target": {"AWSGirApiService.GetFunction"}}, wantErr: true},
		{name: "an operation in an rpc-v2 path", service: "dynamodb", path: "/service/DynamoDB/operation/DeleteTable", header: http.Header{"X-Amz-Target": {"DynamoDB_20120810.GetItem"}}, wantErr: true},
		{name: "a queue url path", service: "sqs", path: "/123456789012/q", form: "Action=SendMessage", wantErr: true},
		{name: "smithy rpc v2", service: "dynamodb", header: http.Header{"X-Amz-Target": {"DynamoDB_20120810.GetItem"}, "Smithy-Protocol": {"rpc-v2-cbor"}}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, _ := url.ParseQuery(tt.query)
			var form url.Values
			if tt.form != "" {
				form, _ = url.ParseQuery(tt.form)
			}
			h := tt.header
			if h == nil {
				h = http.Header{}
			}
			path := tt.path
			if path == "" {
				path = "/"
			}
			got, err := (&AWS{Service: tt.service}).Operation(AWSRequest{Method: "POST", Path: path, Query: q, Header: h, Form: form})
			if tt.wantErr {
				if !errors.Is(err, ErrAWSOperation) {
					t.Fatalf("got %+v, %v; want ErrAWSOperation", got, err)
				}
				return
			}
			if err != nil || got.Action != tt.want || got.Resource != "*" {
				t.Fatalf("got %+v, %v; want %s on *", got, err, tt.want)
			}
		})
	}
}

func BenchmarkS3Operation(b *testing.B) {
	a := &AWS{Service: "s3", Region: "us-east-1"}
	q := url.Values{"x-id": {"PutObject"}}
	h := http.Header{"Content-Type": {"text/csv"}, "X-Amz-Meta-Owner": {"t-42"}, "X-Amz-Date": {"20240101T000000Z"}}
	r := AWSRequest{Method: "PUT", Path: "/reports/t-42/2024/q1 report.csv", Query: q, Header: h}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := a.Operation(r); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzS3Operation: whatever the path and query, a request the broker names
// is sent to exactly the bucket and key it was named on, and that key has
// no dot or empty segment.
func FuzzS3Operation(f *testing.F) {
	for _, s := range [][3]string{
		{"PUT", "/reports/t-42/a.csv", "x-id=PutObject"},
		{"GET", "/reports", "list-type=2&prefix=t-42/"},
		{"PUT", "/reports/t-42/%2E%2E/x", "acl"},
		{"DELETE", "/reports/t-42/a b", "versionId=1"},
		{"POST", "/reports", "delete"},
		{"GET", "reports/x", ""},
		{"GET", "//", ""},
	} {
		f.Add(s[0], s[1], s[2])
	}
	a := &AWS{Service: "s3", Region: "us-east-1"}
	f.Fuzz(func(t *testing.T, method, path, rawQuery string) {
		q, err := url.ParseQuery(rawQuery)
		if err != nil {
			return
		}
		op, err := a.Operation(AWSRequest{Method: method, Path: path, Query: q, Header: http.Header{}})
		if err != nil {
			return
		}
		sent, err := url.PathUnescape(op.SendPath)
		if err != nil || sent != path {
			t.Fatalf("%s %q: sends %q (%q)", method, path, op.SendPath, sent)
		}
		if _, key, ok := strings.Cut(strings.TrimPrefix(path, "/"), "/"); ok && key != "" && segmentFault(key) != "" {
			t.Fatalf("%s %q: a key with a dot or empty segment was named %s", method, path, op.Action)
		}
	})
}

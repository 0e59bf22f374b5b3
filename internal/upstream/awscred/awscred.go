// Package awscred is where AWS credentials come from through the AWS SDK:
// the SDK's default chain, a role assumed through STS, and credentials
// minted per session by STS scoped to the session's grant (an
// upstream.Minter). Static keys and keys held in Vault need no SDK
// (upstream.StaticAWSCredentials, vault.AWSKeys); any of them can be
// the base of an assumed role.
package awscred

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials/stscreds"
	"github.com/aws/aws-sdk-go-v2/service/sts"

	"github.com/airlock-broker/airlock/internal/upstream"
)

// Default is the SDK's default chain (environment, shared files, container
// and instance roles). Nothing is contacted until the first call.
func Default(ctx context.Context, region string) (upstream.AWSCredentialsProvider, error) {
	cfg, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRegion(region))
	if err != nil {
		return nil, fmt.Errorf("aws default credentials: %w", err)
	}
	return fromSDK{cfg.Credentials}, nil
}

// AssumeRole assumes roleARN through STS with base credentials (any
// source: the default chain, keys from Vault or the environment); the
// temporary keys are cached and refreshed before they expire.
// endpoint overrides STS's (a VPC endpoint), or "".
func AssumeRole(base upstream.AWSCredentialsProvider, region, roleARN, endpoint string) upstream.AWSCredentialsProvider {
	opts := sts.Options{Region: region, Credentials: toSDK(base)}
	if endpoint != "" {
		opts.BaseEndpoint = aws.String(endpoint)
	}
	client := sts.New(opts)
	return fromSDK{aws.NewCredentialsCache(stscreds.NewAssumeRoleProvider(client, roleARN, func(o *stscreds.AssumeRoleOptions) {
		o.RoleSessionName = "airlock-broker"
	}))}
}

// fromSDK is an SDK credentials provider as the core's.
type fromSDK struct{ p aws.CredentialsProvider }

func (f fromSDK) Retrieve(ctx context.Context) (upstream.AWSCredentials, error) {
	c, err := f.p.Retrieve(ctx)
	if err != nil {
		return upstream.AWSCredentials{}, err
	}
	return upstream.AWSCredentials{AccessKeyID: c.AccessKeyID, SecretAccessKey: c.SecretAccessKey, SessionToken: c.SessionToken,
		Source: c.Source, CanExpire: c.CanExpire, Expires: c.Expires}, nil
}

// toSDK is the core's provider as the SDK's (the base keys of an STS
// call); an SDK provider is given back as it was.
func toSDK(p upstream.AWSCredentialsProvider) aws.CredentialsProvider {
	if f, ok := p.(fromSDK); ok {
		return f.p
	}
	return aws.CredentialsProviderFunc(func(ctx context.Context) (aws.Credentials, error) {
		c, err := p.Retrieve(ctx)
		if err != nil {
			return aws.Credentials{}, err
		}
		return aws.Credentials{AccessKeyID: c.AccessKeyID, SecretAccessKey: c.SecretAccessKey, SessionToken: c.SessionToken,
			Source: c.Source, CanExpire: c.CanExpire, Expires: c.Expires}, nil
	})
}

"""A private, encrypted S3 bucket that `pulumi destroy` empties and removes."""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

from . import render


class PrivateBucket(pulumi.ComponentResource):
    def __init__(self, name: str, *, purpose: str, opts: pulumi.ResourceOptions | None = None):
        super().__init__("inference-gateway:index:PrivateBucket", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        # force_destroy: the bucket holds only what the stack or its controllers wrote (scripts,
        # certificates), so destroying the stack empties it rather than failing on a full bucket.
        self.bucket = aws.s3.Bucket(f"{name}-bucket", force_destroy=True, tags={"purpose": purpose}, opts=child)
        ownership = aws.s3.BucketOwnershipControls(
            f"{name}-ownership", bucket=self.bucket.id,
            rule=aws.s3.BucketOwnershipControlsRuleArgs(object_ownership="BucketOwnerEnforced"), opts=child)
        public_access = aws.s3.BucketPublicAccessBlock(f"{name}-public-access", bucket=self.bucket.id,
                                                       **render.public_access_block(), opts=child)
        encryption = aws.s3.BucketServerSideEncryptionConfiguration(
            f"{name}-encryption", bucket=self.bucket.id,
            rules=[aws.s3.BucketServerSideEncryptionConfigurationRuleArgs(
                apply_server_side_encryption_by_default=aws.s3.
                BucketServerSideEncryptionConfigurationRuleApplyServerSideEncryptionByDefaultArgs(
                    sse_algorithm="AES256"))],
            opts=child)
        policy = aws.s3.BucketPolicy(f"{name}-tls-only", bucket=self.bucket.id,
                                     policy=self.bucket.arn.apply(render.tls_only_policy),
                                     opts=pulumi.ResourceOptions(parent=self, depends_on=[public_access]))
        self.name = self.bucket.bucket
        self.arn = self.bucket.arn
        # What must exist before anything is stored or granted on the bucket.
        self.ready: list[pulumi.Resource] = [ownership, public_access, encryption, policy]
        self.register_outputs({"name": self.name, "arn": self.arn})

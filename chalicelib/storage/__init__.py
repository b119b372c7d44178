"""Everything that speaks DynamoDB: expressions, attribute values and botocore errors."""

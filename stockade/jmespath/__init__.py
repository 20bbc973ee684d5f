"""jmespath"""
